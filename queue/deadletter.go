package queue

import (
	"time"

	"github.com/warrenmq/warren/amqp"
)

// Dead-letter reasons, as RabbitMQ writes them in x-death.
const (
	ReasonRejected      = "rejected"       // basic.reject or basic.nack with requeue=false
	ReasonExpired       = "expired"        // message TTL ran out
	ReasonMaxLen        = "maxlen"         // dropped or refused by a length limit
	ReasonDeliveryLimit = "delivery_limit" // returned more than x-delivery-limit times
)

// DeadLetter is an effect: Entry left the queue for Reason without being
// acknowledged. The owner deletes its durable record and, when the queue
// has a dead-letter exchange, republishes it there (with AddDeath applied
// to its headers, and for "expired" without its expiration property).
type DeadLetter struct {
	Entry  Entry
	Reason string
}

// Death describes one dead-lettering, for AddDeath.
type Death struct {
	// Queue is the queue the message died in.
	Queue string
	// Reason is one of the Reason constants.
	Reason string
	// Exchange is the exchange the message was last published to.
	Exchange string
	// RoutingKeys are the publish's routing key followed by its CC header
	// keys (not BCC).
	RoutingKeys []string
	// Time is when it died; x-death keeps whole seconds.
	Time time.Time
	// OriginalExpiration is the message's expiration property when it had
	// one ("" otherwise); the owner removes the property when
	// republishing so that the message does not expire again.
	OriginalExpiration string
}

// AddDeath returns a copy of the message headers h (which it does not
// modify) recording death d as RabbitMQ does:
//
//   - x-death is an array of tables, one per (queue, reason), most recent
//     first, each with count (int64), reason, queue, time (time.Time),
//     exchange, routing-keys ([]any of string) and, when the message had an
//     expiration, original-expiration. A death for a (queue, reason)
//     already present increments that entry's count and moves it to the
//     front; its other fields keep the values of the first such death.
//   - x-first-death-queue, -reason and -exchange are set by the first death
//     only; x-last-death-queue, -reason and -exchange by every death.
func AddDeath(h amqp.Table, d Death) amqp.Table {
	out := make(amqp.Table, len(h)+7)
	for k, v := range h {
		out[k] = v
	}
	old, _ := h["x-death"].([]any)
	deaths := make([]any, 1, len(old)+1)
	var match amqp.Table
	var count int64
	for _, x := range old {
		t, ok := asTable(x)
		if ok && t["queue"] == d.Queue && t["reason"] == d.Reason {
			if match == nil {
				match = t
			}
			count += deathCount(t["count"])
			continue
		}
		deaths = append(deaths, x)
	}
	var entry amqp.Table
	if match != nil {
		entry = make(amqp.Table, len(match))
		for k, v := range match {
			entry[k] = v
		}
		entry["count"] = count + 1
	} else {
		keys := make([]any, len(d.RoutingKeys))
		for i, k := range d.RoutingKeys {
			keys[i] = k
		}
		entry = amqp.Table{
			"count":        int64(1),
			"reason":       d.Reason,
			"queue":        d.Queue,
			"time":         d.Time.UTC().Truncate(time.Second),
			"exchange":     d.Exchange,
			"routing-keys": keys,
		}
		if d.OriginalExpiration != "" {
			entry["original-expiration"] = d.OriginalExpiration
		}
	}
	deaths[0] = entry
	out["x-death"] = deaths
	if _, ok := h["x-first-death-reason"]; !ok {
		out["x-first-death-queue"] = d.Queue
		out["x-first-death-reason"] = d.Reason
		out["x-first-death-exchange"] = d.Exchange
	}
	out["x-last-death-queue"] = d.Queue
	out["x-last-death-reason"] = d.Reason
	out["x-last-death-exchange"] = d.Exchange
	return out
}

// DeathCycle reports whether dead-lettering a message with headers h (with
// its latest death already added by AddDeath) to queue would close a
// cycle that RabbitMQ drops: queue appears in x-death and none of the
// deaths from the most recent back to that entry was a rejection (an
// x-death element that is not a table also breaks the cycle: a client put
// it there). A message that was just rejected is therefore never dropped.
// The owner calls it for each queue the dead-letter exchange routes to and
// skips the queues for which it is true.
func DeathCycle(h amqp.Table, queue string) bool {
	deaths, _ := h["x-death"].([]any)
	automatic := true
	for _, x := range deaths {
		t, ok := asTable(x)
		if !ok {
			automatic = false
			continue
		}
		if t["reason"] == ReasonRejected {
			automatic = false
		}
		if t["queue"] == queue {
			return automatic
		}
	}
	return false
}

func asTable(v any) (amqp.Table, bool) {
	switch t := v.(type) {
	case amqp.Table:
		return t, true
	case map[string]any:
		return amqp.Table(t), true
	}
	return nil, false
}

// deathCount reads an x-death count of any integer type; entries written
// before counts existed (RabbitMQ < 3.5) count once.
func deathCount(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int32:
		return int64(n)
	case int16:
		return int64(n)
	case int8:
		return int64(n)
	case int:
		return int64(n)
	case uint32:
		return int64(n)
	case uint16:
		return int64(n)
	case uint8:
		return int64(n)
	}
	return 1
}
