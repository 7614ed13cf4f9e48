package store

import (
	"bytes"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func appendDelayedWait(t *testing.T, s *Store, m *Delayed) {
	t.Helper()
	ch := make(chan error, 1)
	s.AppendDelayed(m, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

func TestDelayedOrderRemoveAndDrop(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	big := bytes.Repeat([]byte("x"), bodyChunkLen+10)
	in := []*Delayed{
		{Key: DelayedKey{Due: 3000, Seq: 1, Exchange: 7}, VHost: "/", Exchange: "e", RoutingKey: "c", Header: []byte{1}, Body: []byte("third")},
		{Key: DelayedKey{Due: 1000, Seq: 2, Exchange: 7}, VHost: "/", Exchange: "e", RoutingKey: "a", Header: []byte{2}, Body: []byte("first")},
		{Key: DelayedKey{Due: 2000, Seq: 3, Exchange: 9}, VHost: "v", Exchange: "f", RoutingKey: "b", Header: []byte{3}, Body: big},
		{Key: DelayedKey{Due: 1 << 50, Seq: 4, Exchange: 7}, VHost: "/", Exchange: "e", Body: []byte("years")},
	}
	for _, m := range in {
		appendDelayedWait(t, s, m)
	}
	k, ok, err := s.NextDelayed()
	if err != nil || !ok || k != in[1].Key {
		t.Fatalf("NextDelayed = %+v %v %v", k, ok, err)
	}
	var got []*Delayed
	if err := s.DueDelayed(2500, 10, func(m *Delayed) error { got = append(got, m); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Body) != "first" || !bytes.Equal(got[1].Body, big) ||
		got[1].VHost != "v" || got[1].Exchange != "f" || got[1].RoutingKey != "b" || got[1].Header[0] != 3 {
		t.Fatalf("DueDelayed(2500) = %d messages: %+v", len(got), got)
	}
	if err := s.RemoveDelayed(got[:1]); err != nil {
		t.Fatal(err)
	}
	// Drop exchange 9's message, with its chunk records.
	n, err := s.DropDelayed(func(id uint64) bool { return id == 9 })
	if err != nil || n != 1 {
		t.Fatalf("DropDelayed = %d, %v", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	var keys []DelayedKey
	if err := s.DelayedKeys(func(k DelayedKey) { keys = append(keys, k) }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] != in[0].Key || keys[1] != in[3].Key {
		t.Fatalf("after restart: keys %+v", keys)
	}
	raw := 0
	_ = s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDelayed}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			raw++
		}
		return nil
	})
	if raw != 2 {
		t.Fatalf("%d records under the delayed prefix, want 2 (chunks left behind?)", raw)
	}
}
