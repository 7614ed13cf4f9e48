package queue

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestCmdCodecReplay encodes every command of random workloads, decodes
// it and applies the decoded command to a second queue: the effects and
// the final state must be those of the original commands, and every
// decoded command must equal its original.
func TestCmdCodecReplay(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		w := newWorkload(seed, DefaultConfig())
		w.run(4000)
		q := New()
		for i := range w.log {
			enc := AppendCmd(nil, &w.log[i])
			cmd, err := DecodeCmd(enc)
			if err != nil {
				t.Fatalf("seed %d command %d (%v): %v", seed, i, w.log[i].Op, err)
			}
			if want := canonical(w.log[i]); !reflect.DeepEqual(cmd, want) {
				t.Fatalf("seed %d command %d: decoded %+v, want %+v", seed, i, cmd, want)
			}
			if got := apply(q, &cmd); !bytes.Equal(got, w.effects[i]) {
				t.Fatalf("seed %d command %d (%v): effects differ", seed, i, cmd.Op)
			}
		}
		if !bytes.Equal(q.Snapshot(), w.q.Snapshot()) {
			t.Fatalf("seed %d: states differ after replaying decoded commands", seed)
		}
	}
}

// canonical is cmd with the fields its Op does not use zeroed, as
// DecodeCmd returns it.
func canonical(c Cmd) Cmd {
	out := Cmd{Op: c.Op, Now: c.Now}
	switch c.Op {
	case OpEnqueue:
		out.TTL, out.Publisher, out.PubSeq, out.ReportEnqueued = c.TTL, c.Publisher, c.PubSeq, c.ReportEnqueued
		m := *c.Msg
		if m.Header == nil {
			m.Header = []byte{}
		}
		if m.Body == nil {
			m.Body = []byte{}
		}
		out.Msg = &m
	case OpAttach:
		out.Consumer, out.Tag, out.Prefetch, out.Priority, out.NoAck, out.Exclusive =
			c.Consumer, c.Tag, c.Prefetch, c.Priority, c.NoAck, c.Exclusive
	case OpDetach:
		out.Consumer = c.Consumer
	case OpGet:
		out.NoAck, out.Consumer = c.NoAck, c.Consumer
	case OpSettle, OpReturn, OpDiscard:
		out.Seq, out.Seqs, out.Consumer = c.Seq, c.Seqs, c.Consumer
		if len(c.Seqs) > 0 {
			out.Seq = 0
		}
	case OpPurge:
		out.Max = c.Max
	case OpSetConfig:
		out.Config = c.Config
	case OpForget:
		out.Publisher = c.Publisher
	}
	return out
}

func TestCmdCodecRefusesBadInput(t *testing.T) {
	msg := &Message{Exchange: "x", RoutingKey: "k", Header: []byte{1, 2}, Body: []byte("body"), Persistent: true, Priority: 3}
	enc := AppendCmd(nil, &Cmd{Op: OpEnqueue, Now: 5, TTL: -1, Publisher: 7, PubSeq: 9, Msg: msg})
	for n := range len(enc) {
		if _, err := DecodeCmd(enc[:n]); !errors.Is(err, ErrBadCommand) {
			t.Fatalf("truncated to %d of %d bytes: err %v, want ErrBadCommand", n, len(enc), err)
		}
	}
	if _, err := DecodeCmd(append(enc, 0)); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("trailing byte: err %v, want ErrBadCommand", err)
	}
	bad := append([]byte(nil), enc...)
	bad[1] = 200
	if _, err := DecodeCmd(bad); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("unknown op: err %v, want ErrBadCommand", err)
	}
	cfg := Config{MessageTTL: 10, MaxLength: -1, MaxLengthBytes: 99, Overflow: RejectPublish, MaxPriority: 0,
		SingleActiveConsumer: true, DeadLetter: true, DeliveryLimit: 3, Expires: 1000, GroupHeader: "JMSXGroupID"}
	got, err := DecodeConfig(AppendConfig(nil, &cfg))
	if err != nil || got != cfg {
		t.Fatalf("config round trip: %+v, %v", got, err)
	}
}
