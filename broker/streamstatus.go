package broker

import (
	"sync"
	"time"
)

// streamStatusTimeout bounds how long the management API waits for a
// member's replica offsets.
const streamStatusTimeout = 2 * time.Second

// WithStreamReplicas fills in, for the replicated streams of qs, each
// member's replica offsets: this node's from its replica, the others' by
// a status request over the node link each (lkStreamRead with limit 0, at
// most 16 at once, streamStatusTimeout each). For the management API. No
// lock held.
func (b *Broker) WithStreamReplicas(qs []QueueInfo) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range qs {
		qi := &qs[i]
		if qi.Type != "stream" || qi.Stream == nil || len(qi.Members) == 0 {
			continue
		}
		v := b.vhost(qi.VHost)
		if v == nil {
			continue
		}
		v.mu.RLock()
		qe := v.queues[qi.Name]
		v.mu.RUnlock()
		if qe == nil || qe.repl == nil {
			continue
		}
		reps := make([]StreamReplicaInfo, len(qi.Members))
		qi.Stream.Replicas = reps
		for j, node := range qi.Members {
			reps[j].Node = node
			if b.local(node) {
				if m := b.replStream(qe); m != nil {
					m.mu.Lock()
					if gs := m.streams[qe.repl.key]; gs != nil {
						reps[j].Online, reps[j].Committed, reps[j].Stored = true, gs.s.CommittedOffset(), gs.stored
					}
					m.mu.Unlock()
				}
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() {
					<-sem
					wg.Done()
				}()
				reps[j].Online, reps[j].Committed, reps[j].Stored = b.remoteReplica(node, qe)
			}()
		}
	}
	wg.Wait()
	for i := range qs {
		if qs[i].Stream == nil {
			continue
		}
		reps := qs[i].Stream.Replicas
		var top uint64
		for _, r := range reps {
			if r.Online {
				top = max(top, r.Committed)
			}
		}
		for j := range reps {
			if reps[j].Online && top > reps[j].Committed {
				reps[j].Lag = top - reps[j].Committed
			}
		}
	}
}

// remoteReplica asks node for its replica of replicated stream qe.
func (b *Broker) remoteReplica(node string, qe *queueEntity) (ok bool, committed, stored uint64) {
	if b.cfg.QuorumGroups != nil && !b.cfg.QuorumGroups.Alive(node) {
		return false, 0, 0
	}
	p := b.peer(node)
	if p == nil {
		return false, 0, 0
	}
	p.awaitFirst()
	k, g := qe.repl.key, qe.repl.group
	rep := p.callWithin(lkStreamRead, &linkWaiter{}, streamStatusTimeout, func(buf []byte, id uint64) []byte {
		buf = appendU(appendU(buf, id), g)
		buf = appendS(appendS(buf, k.VHost), k.Name)
		buf = appendU(buf, k.ID)
		return appendU(appendU(buf, 0), 0)
	})
	if rep.err != nil {
		return false, 0, 0
	}
	d := linkDecoder{b: rep.data}
	code, _ := d.u(), d.u()
	committed, stored = d.u(), d.u()
	if d.err != nil || code != 0 {
		return false, 0, 0
	}
	return true, committed, stored
}
