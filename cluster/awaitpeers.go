package cluster

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A definition change is answered once every node applied it, as far as
// that can be known quickly: RaftLog.Propose returns when the change is
// applied on the proposing node, and the other nodes apply it within a
// round trip (the leader tells them the commit at once), but a client told
// "declare-ok" may already be publishing through another node, whose
// routing would not have the queue yet and would drop the message it then
// confirms. So after a proposal the broker calls AwaitPeers, which asks
// each other member this node has a live session with to answer once it
// has applied the change ('W' request), and waits for the answers.
//
// A member that does not answer within awaitPeersLimit (partitioned behind
// a session not yet timed out, or far behind) is not waited for again for
// awaitPeersBackoff, so that a partition costs a change at most one such
// wait per member in that time, not one each.

const (
	// awaitPeersLimit bounds the wait for one member.
	awaitPeersLimit = 500 * time.Millisecond
	// awaitPeersBackoff is how long a member that did not answer in time
	// is not waited for.
	awaitPeersBackoff = 10 * time.Second
)

// AwaitPeers waits until every other member of the group with a live
// session to this node has applied index, for at most awaitPeersLimit
// each (the waits run together) or until ctx ends.
func (l *RaftLog) AwaitPeers(ctx context.Context, index uint64) {
	if l.running() == nil {
		return
	}
	self := l.node.Name()
	payload := binary.BigEndian.AppendUint64(nil, index)
	now := time.Now()
	var wg sync.WaitGroup
	for name, addr := range l.Members() {
		if name == self || !l.node.connected(addr) || l.peerSkipped(name, now) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			timeout := awaitPeersLimit
			if d, ok := ctx.Deadline(); ok {
				timeout = min(timeout, time.Until(d))
			}
			if timeout <= 0 {
				return
			}
			if _, _, err := l.call(addr, metaAwait, payload, timeout); err != nil {
				l.skipPeer(name, err)
			}
		}()
	}
	wg.Wait()
}

// peerSkipped reports whether AwaitPeers skips the member named name.
func (l *RaftLog) peerSkipped(name string, now time.Time) bool {
	l.awaitMu.Lock()
	defer l.awaitMu.Unlock()
	until, ok := l.awaitSkip[name]
	if ok && now.After(until) {
		delete(l.awaitSkip, name)
		return false
	}
	return ok
}

// skipPeer makes AwaitPeers skip the member named name for
// awaitPeersBackoff.
func (l *RaftLog) skipPeer(name string, err error) {
	l.awaitMu.Lock()
	defer l.awaitMu.Unlock()
	if l.awaitSkip == nil {
		l.awaitSkip = make(map[string]time.Time)
	}
	if _, ok := l.awaitSkip[name]; !ok {
		l.log.Warn("a member did not confirm applying a definition change in time; not waiting for it for a while",
			zap.String("peer", name), zap.Duration("for", awaitPeersBackoff), zap.Error(err))
	}
	l.awaitSkip[name] = time.Now().Add(awaitPeersBackoff)
}
