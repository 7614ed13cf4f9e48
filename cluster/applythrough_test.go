package cluster

import (
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// TestApplyThrough: a follower told by the leader that an entry committed
// applies its log up to that entry at once, in order, when its log holds
// it with the same term; not when the log lacks it or holds another
// term's entry there; and Raft's FSM goroutine then skips what was
// applied ahead of it and applies what follows.
func TestApplyThrough(t *testing.T) {
	st := openStore(t, t.TempDir(), false)
	defer st.Close()
	logs, err := raft.NewLogCache(16, NewRaftStore(st.Log(7)))
	if err != nil {
		t.Fatal(err)
	}
	cmd := func(index, term uint64, c string) *raft.Log {
		id := reqID{byte(index), 1}
		return &raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: append(id[:], c...)}
	}
	entries := []*raft.Log{
		cmd(1, 1, "a"), cmd(2, 1, "b"),
		{Index: 3, Term: 2, Type: raft.LogNoop},
		cmd(4, 2, "c"), cmd(5, 2, "d"),
	}
	if err := logs.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	m := &listMachine{}
	f := newRaftFSM(m)
	ch := f.wait(reqID{4, 1})
	if f.applyThrough(logs, entryAt{index: 4, term: 3}) {
		t.Fatal("applied through an entry of another term")
	}
	if f.applyThrough(logs, entryAt{index: 6, term: 2}) {
		t.Fatal("applied through an entry the log lacks")
	}
	if got := m.list(); len(got) != 0 {
		t.Fatalf("applied %v, want nothing", got)
	}
	if !f.applyThrough(logs, entryAt{index: 4, term: 2}) {
		t.Fatal("did not apply through entry 4 of term 2")
	}
	if got, want := m.list(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Fatalf("applied %v, want %v", got, want)
	}
	select {
	case a := <-ch:
		if a.Index != 4 {
			t.Fatalf("the waiter of entry 4 got index %d", a.Index)
		}
	default:
		t.Fatal("the waiter of entry 4 got no result")
	}
	// Raft's FSM goroutine catches up: entries 1–4 are skipped, 5 applied.
	for _, e := range entries {
		if e.Type == raft.LogCommand {
			f.Apply(e)
		}
	}
	if got, want := m.list(), []string{"a", "b", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("after Raft's applies: %v, want %v", got, want)
	}
	if !f.applyThrough(logs, entryAt{index: 5, term: 2}) || f.applied.Load() != 5 {
		t.Fatalf("applied index %d, want 5", f.applied.Load())
	}
}
