package cluster

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"

	"github.com/warrenmq/warren/store"
)

// RaftStore adapts a store.Log to raft.LogStore and raft.StableStore: each
// Raft group keeps its log, term and vote in one ordered log of the node's
// store, so the appends of every group go through the store's one
// group-commit writer (one fsync per batch for all groups).
type RaftStore struct{ l *store.Log }

// NewRaftStore returns the Raft log and stable store of log l.
func NewRaftStore(l *store.Log) RaftStore { return RaftStore{l} }

var (
	_ raft.LogStore    = RaftStore{}
	_ raft.StableStore = RaftStore{}
)

// errKeyNotFound is what Raft expects from a StableStore for a missing key:
// it compares the message, "not found" (raft.go, api.go).
var errKeyNotFound = errors.New("not found")

func (s RaftStore) FirstIndex() (uint64, error) {
	first, _, err := s.l.Bounds()
	return first, err
}

func (s RaftStore) LastIndex() (uint64, error) {
	_, last, err := s.l.Bounds()
	return last, err
}

func (s RaftStore) GetLog(index uint64, out *raft.Log) error {
	e, err := s.l.Entry(index)
	return raftLog(e, err, out)
}

func (s RaftStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s RaftStore) StoreLogs(logs []*raft.Log) error {
	es := logEntries(logs)
	return s.l.AppendWait(es)
}

func (s RaftStore) DeleteRange(min, max uint64) error { return s.l.DeleteRange(min, max) }

func (s RaftStore) Set(key, val []byte) error { return s.l.SetValue(key, val) }

func (s RaftStore) Get(key []byte) ([]byte, error) {
	v, err := s.l.Value(key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errKeyNotFound
	}
	return v, err
}

func (s RaftStore) SetUint64(key []byte, v uint64) error { return s.l.SetUint64(key, v) }

func (s RaftStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.l.Uint64(key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, errKeyNotFound
	}
	return v, err
}

// raftLog is what GetLog answers for entry e read with err: a missing
// entry is raft.ErrLogNotFound.
func raftLog(e store.LogEntry, err error, out *raft.Log) error {
	if errors.Is(err, store.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	*out = raft.Log{Index: e.Index, Term: e.Term, Type: raft.LogType(e.Type), Data: e.Data, Extensions: e.Extensions}
	if e.AppendedAt != 0 {
		out.AppendedAt = time.Unix(0, e.AppendedAt)
	}
	return nil
}

// logEntries are Raft's logs as store entries (sharing their slices).
func logEntries(logs []*raft.Log) []store.LogEntry {
	es := make([]store.LogEntry, len(logs))
	for i, l := range logs {
		es[i] = store.LogEntry{Index: l.Index, Term: l.Term, Type: uint8(l.Type), Data: l.Data, Extensions: l.Extensions}
		if !l.AppendedAt.IsZero() {
			es[i].AppendedAt = l.AppendedAt.UnixNano()
		}
	}
	return es
}

// SegmentStore adapts a store.SegmentLog to raft.LogStore: a data group's
// entries, which carry message bodies, are appended to files of the group's
// own (one write and one fdatasync each) instead of going through Badger;
// its term and vote stay in the store's log (RaftStore).
type SegmentStore struct{ l *store.SegmentLog }

var (
	_ raft.LogStore        = SegmentStore{}
	_ raft.StagingLogStore = SegmentStore{}
)

func (s SegmentStore) FirstIndex() (uint64, error) {
	first, _ := s.l.Bounds()
	return first, nil
}

func (s SegmentStore) LastIndex() (uint64, error) {
	_, last := s.l.Bounds()
	return last, nil
}

func (s SegmentStore) GetLog(index uint64, out *raft.Log) error {
	e, err := s.l.Entry(index)
	return raftLog(e, err, out)
}

func (s SegmentStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s SegmentStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	es, ok := s.l.Staged(logs[0].Index, len(logs))
	if !ok {
		es = logEntries(logs)
	}
	return s.l.Append(es)
}

// StageLogs makes a leader's new entries readable for its replication
// while it writes them (raft.StagingLogStore, a change of Warren's copy of
// hashicorp/raft): the leader's write and its followers' overlap.
func (s SegmentStore) StageLogs(logs []*raft.Log) { s.l.Stage(logEntries(logs)) }

func (s SegmentStore) DeleteRange(min, max uint64) error { return s.l.DeleteRange(min, max) }

// moveBatch bounds the bytes of entries moved in one append by
// openSegmentStore.
const moveBatch = 16 << 20

// openSegmentStore opens the segment log in dir. Entries kept in the
// store's log old (by a version that kept data groups' entries there) are
// moved into it first: copied, synced, then deleted from old. A move cut
// short leaves entries in old, and is started again from scratch.
func openSegmentStore(dir string, st *store.Store, old *store.Log) (*store.SegmentLog, error) {
	sl, err := store.OpenSegmentLog(dir, store.SegmentLogOptions{NoSync: st.NoSync()})
	if err != nil {
		return nil, err
	}
	first, last, err := old.Bounds()
	if err != nil || last == 0 {
		if err != nil {
			sl.Close()
		}
		return sl, err
	}
	fail := func(err error) (*store.SegmentLog, error) {
		sl.Close()
		return nil, fmt.Errorf("cluster: moving a data group's log to %s: %w", dir, err)
	}
	if err := sl.DeleteRange(0, math.MaxUint64); err != nil {
		return fail(err)
	}
	var batch []store.LogEntry
	size := 0
	flush := func() error {
		err := sl.Append(batch)
		batch, size = nil, 0
		return err
	}
	err = old.Entries(first, last, func(e *store.LogEntry) error {
		if n := len(batch); n > 0 && (batch[n-1].Index+1 != e.Index || size > moveBatch) {
			if err := flush(); err != nil {
				return err
			}
		}
		batch = append(batch, *e)
		size += len(e.Data) + len(e.Extensions)
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil {
		err = old.DeleteRange(first, last)
	}
	if err != nil {
		return fail(err)
	}
	return sl, nil
}
