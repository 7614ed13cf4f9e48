package cluster

import "github.com/hashicorp/raft"

// A follower of the metadata group can know an entry committed before the
// leader tells it. Raft commits an entry of the leader's term once a
// majority of the voters holds it durably, whether or not the leader has
// counted them yet: from then on no candidate without it can win an
// election (each majority of voters has a node with it, which refuses to
// vote for a log less up to date). The leader of a term writes each entry
// it creates to its own log, and syncs it, before it sends it to anyone
// (hashicorp/raft's dispatchLogs), so when a follower has written an entry
// of its current term, received from that term's leader, two voters hold
// it: in a group of at most three voters, a majority. The entries before it
// are committed with it (log matching).
//
// So after each of its log writes a follower in such a group notes the
// last entry written of its current term (noteDurable), and a proposer on
// it waiting for a forwarded command applies its log up to that entry
// (applyDurable, through raftFSM.applyThrough) without waiting for the
// leader's commit, its apply and its answer: the forwarded change is
// answered as soon as the forwarding node's own log holds it. Rules kept:
//   - only entries whose term is the follower's current term, written while
//     it follows that term's leader (an entry of an older term that a
//     later leader replicates may still be replaced: Raft's figure 8);
//   - the follower and the leader are both voters of the latest
//     configuration, which has at most three voters (with more, two copies
//     are no majority);
//   - no write that carries a configuration entry counts: Raft takes a new
//     configuration into use only after storing it, so the one read here
//     could be older than the one the entries are committed under.
// Membership changes are made one server at a time, so the majorities of
// consecutive configurations overlap and an entry held by two voters of
// three is held by a node of every majority of the next configuration too.

// noteDurable is told, on Raft's goroutine, that logs were written to this
// node's log and synced.
func (l *RaftLog) noteDurable(logs []*raft.Log) {
	r := l.running()
	if r == nil || r.State() != raft.Follower || len(logs) == 0 {
		return
	}
	term := r.CurrentTerm()
	var at entryAt
	for _, e := range logs {
		switch e.Type {
		case raft.LogConfiguration, raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
			return
		}
		if e.Term == term {
			at = entryAt{e.Index, e.Term}
		}
	}
	if at.index == 0 {
		return
	}
	_, leader := r.LeaderWithID()
	if leader == "" || string(leader) == l.node.Name() {
		return
	}
	voters, me, lead := 0, false, false
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		me = me || string(s.ID) == l.node.Name()
		lead = lead || s.ID == leader
	}
	if voters > 3 || !me || !lead {
		return
	}
	l.durableMu.Lock()
	if at.index > l.durable.index {
		l.durable = at
	}
	l.durableMu.Unlock()
}

// applyDurable applies this node's log up to the last entry noteDurable
// knows committed, if it has not been applied yet.
func (l *RaftLog) applyDurable() {
	l.durableMu.Lock()
	at := l.durable
	l.durableMu.Unlock()
	if at.index != 0 && l.fsm.applied.Load() < at.index {
		l.fsm.applyThrough(l.logs, at)
	}
}
