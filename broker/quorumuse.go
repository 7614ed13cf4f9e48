package broker

import (
	"context"
	"fmt"
	"time"
)

// QuorumGroupsInUse returns the data groups that hold at least one
// replicated quorum queue of this node's definitions: the groups a member
// must run (cmd/warren leaves the others dormant).
func (b *Broker) QuorumGroupsInUse() map[uint64]bool {
	use := map[uint64]bool{}
	for g := range b.quorumQueuesPerGroup() {
		use[g] = true
	}
	return use
}

// quorumQueuesPerGroup counts the replicated queues (quorum queues and
// streams) of each data group.
func (b *Broker) quorumQueuesPerGroup() map[uint64]int {
	n := map[uint64]int{}
	for _, v := range b.allVHosts() {
		v.mu.RLock()
		for _, qe := range v.queues {
			if qe.repl != nil {
				n[qe.repl.group]++
			}
		}
		v.mu.RUnlock()
	}
	return n
}

// GroupLeader is a data group's leader as a rebalance reports it.
type GroupLeader struct {
	Group uint64 `json:"group"`
	// Preferred is the member the group's leadership goes back to (the
	// plan's first: the plan spreads them evenly over the nodes).
	Preferred string `json:"preferred"`
	// Leader is "" when none is known here: the group is dormant (it
	// never held a queue), has no majority, or this node is not a member.
	Leader string `json:"leader"`
	// Queues is the number of replicated queues in the group.
	Queues int `json:"queues"`
}

// RebalanceQuorumLeaders is rabbitmq-queues rebalance. A data group's
// leader hands the leadership back to the group's preferred member on its
// own once that member is up and the group has been idle for a second
// (cluster/datagroup.go), so there is nothing to move: this waits, for at
// most wait, until every group holding queues whose preferred member is up
// is led by it, and reports each group's leader.
func (b *Broker) RebalanceQuorumLeaders(ctx context.Context, wait time.Duration) ([]GroupLeader, error) {
	if !b.replicated() {
		return nil, fmt.Errorf("this node has no data groups: %w", ErrInvalid)
	}
	qg := b.cfg.QuorumGroups
	deadline := time.Now().Add(wait)
	for {
		queues := b.quorumQueuesPerGroup()
		var out []GroupLeader
		balanced := true
		for _, g := range qg.Groups() {
			gl := GroupLeader{Group: g.ID, Leader: qg.LeaderName(g.ID), Queues: queues[g.ID]}
			if len(g.Members) > 0 {
				gl.Preferred = g.Members[0]
			}
			if gl.Queues > 0 && gl.Leader != "" && gl.Leader != gl.Preferred && qg.Alive(gl.Preferred) {
				balanced = false
			}
			out = append(out, gl)
		}
		if balanced || !time.Now().Before(deadline) {
			return out, nil
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return out, ctx.Err()
		case <-t.C:
		}
	}
}
