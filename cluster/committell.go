package cluster

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Telling followers the commit index without a log entry.
//
// A hashicorp/raft follower learns the commit index only from an
// AppendEntries request that carries it: Raft's heartbeats do not, and the
// leader sends one with no new entry only every commit timeout. Once the
// leader has applied commands (proposed on it, or forwarded by a follower
// that waits to apply them itself), notifyLoop has a teller per follower
// send that follower an AppendEntries of its own: the leader's current
// term, no entries, the previous entry the last index applied on the
// leader (with its term), and that index as the commit index. It is a
// request the leader could have sent itself: the follower checks that its
// entry at that index has the same term (so by Raft's log matching its log
// up to there is the leader's) before it commits and applies up to it, and
// refuses it if the term is older than its own. No entry is appended, so
// this costs no sync on either side (the commit notice it replaces, an
// empty entry, cost one on the leader and one on each follower before the
// follower could apply).
//
// A follower that does not have the entry yet (the leader committed with
// another follower's copy) answers with its last index; the teller tries
// again shortly after, until tellPatience has passed, and then appends a
// commit notice (the next AppendEntries Raft sends carries the commit
// index). A follower whose entry differs appends from the leader anyway;
// it gets a commit notice at once. An unreachable follower is left to Raft.

// tellPatience is how long a teller retries a follower that lacks the
// entry before falling back to a commit notice; tellRetry the first pause.
const (
	tellPatience = 100 * time.Millisecond
	tellRetry    = 500 * time.Microsecond
)

// commitTeller tells one follower the commit index (notifyLoop's).
type commitTeller struct {
	id   raft.ServerID
	addr raft.ServerAddress
	// want is the highest applied index to tell.
	want atomic.Uint64
	wake chan struct{}
	stop chan struct{}
}

// tellOutcome is what one try of telling a follower gave.
type tellOutcome int

const (
	tellDone   tellOutcome = iota // the follower committed up to the index
	tellBehind                    // it lacks the entry: try again soon
	tellNotice                    // its entry differs: append a commit notice
	tellGiveUp                    // unreachable, or this node no longer leads
)

// tellers keeps a teller per follower of the configuration (notifyLoop's
// goroutine): it is read from Raft at most once a second, and at once
// after this node changed the members (membersChanged) or became the
// leader, so that a node just added is told from its first command on.
type tellers struct {
	by      map[raft.ServerID]*commitTeller
	checked time.Time
}

// membersChanged has the next telling read the configuration again (this
// node added or removed a member), and tells the members the commit index.
func (l *RaftLog) membersChanged() {
	l.cfgChanged.Store(true)
	l.noticeSoon()
}

// tellAll hands idx to every follower's teller, starting tellers for new
// members and stopping those of members gone.
func (l *RaftLog) tellAll(ts *tellers, idx uint64) {
	if l.cfgChanged.Swap(false) || ts.by == nil || time.Since(ts.checked) > time.Second {
		ts.checked = time.Now()
		cf := l.raft.GetConfiguration()
		if cf.Error() != nil {
			return
		}
		self := raft.ServerID(l.node.Name())
		keep := make(map[raft.ServerID]*commitTeller)
		for _, s := range cf.Configuration().Servers {
			if s.ID == self {
				continue
			}
			t := ts.by[s.ID]
			if t == nil || t.addr != s.Address {
				if t != nil {
					close(t.stop)
				}
				t = &commitTeller{id: s.ID, addr: s.Address, wake: make(chan struct{}, 1), stop: make(chan struct{})}
				l.wg.Add(1)
				go l.tell(t)
			}
			keep[s.ID] = t
		}
		for id, t := range ts.by {
			if keep[id] != t {
				close(t.stop)
			}
		}
		ts.by = keep
	}
	for _, t := range ts.by {
		if idx > t.want.Load() {
			t.want.Store(idx)
		}
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// tell is a follower's teller: it sends the latest index it was given,
// coalescing, until the log closes or the follower leaves.
func (l *RaftLog) tell(t *commitTeller) {
	defer l.wg.Done()
	var told uint64
	for {
		select {
		case <-l.done:
			return
		case <-t.stop:
			return
		case <-t.wake:
		}
		start, pause := time.Now(), tellRetry
		for {
			// Raft's commit index covers every entry of the batch
			// being applied, not only the one that woke the teller.
			idx := max(t.want.Load(), l.raft.CommitIndex())
			if idx <= told {
				break
			}
			out := l.tellCommit(t, idx)
			if out == tellBehind && time.Since(start) < tellPatience {
				select {
				case <-l.done:
					return
				case <-t.stop:
					return
				case <-time.After(pause):
				}
				pause = min(2*pause, 10*time.Millisecond)
				continue
			}
			if out == tellBehind || out == tellNotice {
				// The notice's outcome does not matter: a lost one
				// only delays the follower until the next entry or the
				// commit timeout.
				l.raft.Apply(commitNotice, l.cfg.ProposeTimeout)
			}
			told = idx
		}
	}
}

// tellCommit sends follower t an AppendEntries with no entries whose
// previous entry and commit index are idx, an index applied on this
// leader.
func (l *RaftLog) tellCommit(t *commitTeller, idx uint64) tellOutcome {
	var e raft.Log
	if err := l.logs.GetLog(idx, &e); err != nil {
		return tellGiveUp // compacted: a snapshot covers it
	}
	if l.raft.State() != raft.Leader {
		return tellGiveUp
	}
	term := l.raft.CurrentTerm()
	if l.raft.State() != raft.Leader {
		return tellGiveUp
	}
	self := raft.ServerID(l.node.Name())
	me := l.trans.EncodePeer(self, raft.ServerAddress(l.node.Addr()))
	req := raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: l.rc.ProtocolVersion, ID: []byte(self), Addr: me},
		Term:              term,
		Leader:            me,
		PrevLogEntry:      idx,
		PrevLogTerm:       e.Term,
		LeaderCommitIndex: idx,
	}
	var resp raft.AppendEntriesResponse
	if err := l.trans.AppendEntries(t.id, t.addr, &req, &resp); err != nil {
		return tellGiveUp
	}
	switch {
	case resp.Success:
		return tellDone
	case resp.Term > term:
		return tellGiveUp
	case resp.LastLog < idx:
		return tellBehind
	}
	return tellNotice
}
