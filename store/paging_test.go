package store

import (
	"fmt"
	"testing"
)

func TestSpillReadUnspillAndDropOnOpen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for seq := uint64(1); seq <= 5; seq++ {
		s.Spill(7, seq, &Message{Exchange: "x", RoutingKey: "k", Header: []byte{1, 2}, Body: []byte(fmt.Sprint("body", seq)), Expires: int64(seq)})
	}
	s.Append(9, 2, &Message{Exchange: "j", Body: []byte("journaled")}, nil)
	s.Unspill(7, 3)
	got := map[uint64]string{}
	err := s.ReadMessages(7, true, []uint64{1, 2, 3, 5, 6}, func(seq uint64, m *Message) {
		if m == nil {
			got[seq] = "<nil>"
			return
		}
		got[seq] = string(m.Body)
		if m.Exchange != "x" || m.RoutingKey != "k" || len(m.Header) != 2 || m.Expires != int64(seq) {
			t.Errorf("message %d: %+v", seq, m)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{1: "body1", 2: "body2", 3: "<nil>", 5: "body5", 6: "<nil>"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read %v, want %v", got, want)
	}
	err = s.ReadMessages(9, false, []uint64{2}, func(seq uint64, m *Message) {
		if m == nil || string(m.Body) != "journaled" {
			t.Errorf("journal read %d: %+v", seq, m)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveSpilled(7); err != nil {
		t.Fatal(err)
	}
	_ = s.ReadMessages(7, true, []uint64{1}, func(seq uint64, m *Message) {
		if m != nil {
			t.Error("spilled message survived RemoveSpilled")
		}
	})
	s.Spill(8, 1, &Message{Body: []byte("gone after restart")})
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	_ = s.ReadMessages(8, true, []uint64{1}, func(seq uint64, m *Message) {
		if m != nil {
			t.Error("spilled message survived a restart")
		}
	})
	_ = s.ReadMessages(9, false, []uint64{2}, func(seq uint64, m *Message) {
		if m == nil {
			t.Error("journaled message lost")
		}
	})
}
