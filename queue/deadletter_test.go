package queue

import (
	"reflect"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

func TestAddDeath(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	t1 := t0.Add(time.Hour)
	d1 := Death{Queue: "q1", Reason: ReasonExpired, Exchange: "ex", RoutingKeys: []string{"rk", "cc"}, Time: t0, OriginalExpiration: "100"}
	d2 := Death{Queue: "q2", Reason: ReasonRejected, Exchange: "dlx", RoutingKeys: []string{"rk"}, Time: t1}
	d3 := Death{Queue: "q1", Reason: ReasonExpired, Exchange: "dlx", RoutingKeys: []string{"other"}, Time: t1}

	in := amqp.Table{"app": "keep"}
	h1 := AddDeath(in, d1)
	if len(in) != 1 {
		t.Fatal("input modified")
	}
	want1 := amqp.Table{
		"app": "keep",
		"x-death": []any{amqp.Table{
			"count": int64(1), "reason": "expired", "queue": "q1", "time": t0.Truncate(time.Second),
			"exchange": "ex", "routing-keys": []any{"rk", "cc"}, "original-expiration": "100",
		}},
		"x-first-death-queue": "q1", "x-first-death-reason": "expired", "x-first-death-exchange": "ex",
		"x-last-death-queue": "q1", "x-last-death-reason": "expired", "x-last-death-exchange": "ex",
	}
	if !reflect.DeepEqual(h1, want1) {
		t.Fatalf("first death\n got %#v\nwant %#v", h1, want1)
	}
	if err := h1.Validate(); err != nil {
		t.Fatal(err)
	}

	h2 := AddDeath(h1, d2)
	h3 := AddDeath(h2, d3)
	xd := h3["x-death"].([]any)
	if len(xd) != 2 {
		t.Fatalf("x-death %v", xd)
	}
	front, back := xd[0].(amqp.Table), xd[1].(amqp.Table)
	// The repeated (q1, expired) entry is counted and moved to the front,
	// keeping the fields of its first death.
	if front["queue"] != "q1" || front["count"] != int64(2) || front["exchange"] != "ex" || !front["time"].(time.Time).Equal(t0.Truncate(time.Second)) {
		t.Fatalf("front %v", front)
	}
	if back["queue"] != "q2" || back["reason"] != "rejected" || back["count"] != int64(1) {
		t.Fatalf("back %v", back)
	}
	if h3["x-first-death-queue"] != "q1" || h3["x-first-death-exchange"] != "ex" ||
		h3["x-last-death-queue"] != "q1" || h3["x-last-death-exchange"] != "dlx" || h2["x-last-death-reason"] != "rejected" {
		t.Fatalf("first/last %v", h3)
	}
	if h1["x-death"].([]any)[0].(amqp.Table)["count"] != int64(1) {
		t.Fatal("earlier headers modified")
	}

	// Round trip through the wire, then count again (decoded count is int64).
	b, err := h3.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	dec, _, err := amqp.DecodeTable(b)
	if err != nil {
		t.Fatal(err)
	}
	h4 := AddDeath(dec, d2)
	if c := h4["x-death"].([]any)[0].(amqp.Table); c["queue"] != "q2" || c["count"] != int64(2) {
		t.Fatalf("after decode %v", c)
	}
}

func TestDeathCycle(t *testing.T) {
	death := func(q, r string) amqp.Table { return amqp.Table{"queue": q, "reason": r, "count": int64(1)} }
	tests := []struct {
		name   string
		deaths []any // most recent first
		queue  string
		want   bool
	}{
		{name: "no x-death", deaths: nil, queue: "a", want: false},
		{name: "queue not in x-death", deaths: []any{death("b", "expired")}, queue: "a", want: false},
		{name: "expired back into itself", deaths: []any{death("a", "expired")}, queue: "a", want: true},
		{name: "automatic cycle through two queues", deaths: []any{death("b", "maxlen"), death("a", "expired")}, queue: "a", want: true},
		{name: "just rejected", deaths: []any{death("a", "rejected")}, queue: "a", want: false},
		{name: "rejection in the cycle", deaths: []any{death("b", "expired"), death("c", "rejected"), death("a", "expired")}, queue: "a", want: false},
		{name: "rejection before the cycle", deaths: []any{death("b", "expired"), death("a", "expired"), death("c", "rejected")}, queue: "a", want: true},
		{name: "foreign element breaks cycle", deaths: []any{"junk", death("a", "expired")}, queue: "a", want: false},
		{name: "delivery limit", deaths: []any{death("a", "delivery_limit")}, queue: "a", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := amqp.Table{}
			if tt.deaths != nil {
				h["x-death"] = tt.deaths
			}
			if got := DeathCycle(h, tt.queue); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
	// With AddDeath: a message that expires in a and is routed back to a.
	h := AddDeath(nil, Death{Queue: "a", Reason: ReasonExpired, Time: time.Unix(0, 0)})
	if !DeathCycle(h, "a") || DeathCycle(h, "b") {
		t.Fatal("cycle after AddDeath")
	}
}
