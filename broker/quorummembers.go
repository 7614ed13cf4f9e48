package broker

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Membership changes of data groups (cmd/warren's add_member,
// delete_member, grow, shrink). The plan of a group may drop this node
// while it still runs the group's Raft replica (until the group's leader
// has removed it, and this node has learnt that the removal committed).
// From the moment it learns it is not a member (SetQuorumAway) this node
// proposes no publish and no attach to its replica any more: publishes to
// the group's queues go over the node link to a current member (whose
// proposer commits them in the group, and whose answer is the confirm:
// forwardReplLocked, linkServer.publishRepl), consumers of its clients on
// those queues are cancelled (basic.cancel: the client consumes again, and
// is served through a member: quorumlink.go). Settlements of what its
// consumers held still go through its replica while it runs (they are
// idempotent: none is a confirm). Once the group is stopped here
// (LeftQuorumGroup) its state machine and proposer are forgotten.

// SetQuorumAway tells the broker whether this node is a member of data
// group g per the current plan: members is nil when it is, else the
// group's members (the nodes its publishes go to).
func (b *Broker) SetQuorumAway(g uint64, members []string) {
	r := &b.repl
	r.mu.Lock()
	was := r.away[g] != nil
	if members == nil {
		delete(r.away, g)
		r.mu.Unlock()
		return
	}
	if r.away == nil {
		r.away = map[uint64][]string{}
	}
	r.away[g] = slices.Clone(members)
	var cancel []*consumer
	if !was {
		for _, cons := range r.consumers {
			if cons.qe.repl != nil && cons.qe.repl.group == g && cons.qe.stream == nil {
				cancel = append(cancel, cons)
			}
		}
	}
	r.mu.Unlock()
	if !was {
		b.log.Info("no longer a member of a data group: its queues' publishes go to a member", zap.Uint64("group", g), zap.Strings("members", members))
	}
	for _, cons := range cancel {
		cons.qe.removeReplConsumer(cons)
		cons.serverCancel()
	}
}

// LeftQuorumGroup forgets data group g's state machine and proposer on
// this node, which stopped its replica (it was removed from the group).
func (b *Broker) LeftQuorumGroup(g uint64) {
	r := &b.repl
	r.mu.Lock()
	delete(r.machines, g)
	delete(r.proposers, g)
	r.mu.Unlock()
}

// replAway returns the node a publish to group g goes to when this node
// is not a member of it ("" when it is: it proposes itself), and whether
// it is away.
func (b *Broker) replAway(g uint64) (string, bool) {
	r := &b.repl
	r.mu.Lock()
	members := r.away[g]
	r.mu.Unlock()
	if members == nil {
		return "", false
	}
	for _, n := range members {
		if b.cfg.QuorumGroups.Alive(n) {
			return n, true
		}
	}
	return "", true
}

// forwardReplLocked sends a publish to replicated queue qe, whose group
// this node is not a member of, to node, a member: its confirm is the
// member's, sent once the member has the enqueue committed in the group. A
// message that cannot go is nacked (never confirmed). Hold qe.mu.
func (ch *channel) forwardReplLocked(qe *queueEntity, node string, msg *queue.Message, confirmSeq uint64, throttle *chan struct{}) bool {
	var p *linkPeer
	if node != "" && ch.c.b.cfg.Link != nil {
		p = ch.c.b.peer(node)
	}
	if p == nil {
		if confirmSeq != 0 {
			ch.confirms.done(confirmSeq, errLinkDown)
		}
		return false
	}
	p.mu.Lock()
	w := p.w
	if w == nil {
		p.mu.Unlock()
		if confirmSeq != 0 {
			ch.confirms.done(confirmSeq, errLinkDown)
		}
		return false
	}
	id := uint64(0)
	if confirmSeq != 0 {
		p.next++
		id = p.next
		ch.confirms.hold(confirmSeq)
		p.waiters[id] = &linkWaiter{ch: ch, seq: confirmSeq}
	}
	p.mu.Unlock()
	start, ok := w.begin(lkPublish)
	if !ok {
		if id != 0 {
			p.mu.Lock()
			wt := p.waiters[id]
			delete(p.waiters, id)
			p.mu.Unlock()
			if wt != nil {
				ch.journaled(confirmSeq, errLinkDown)
			}
		}
		return false
	}
	w.buf = appendU(w.buf, id)
	w.buf = appendQueueRef(w.buf, qe)
	w.buf = appendLinkMessage(w.buf, msg)
	if hold := w.end(start); hold != nil && *throttle == nil {
		*throttle = hold
	}
	qe.stats.publish++
	return true
}

// publishRepl is a peer's publish to replicated queue or stream qe (the
// peer is not a member of its group): proposed by this node's proposer
// (a stream's through its appender), answered once the group has applied
// it here. A node that is not a member itself
// refuses it (the peer nacks).
func (s *linkServer) publishRepl(qe *queueEntity, msg *queue.Message, id uint64) chan struct{} {
	p := s.memberProposer(qe, id)
	if p == nil {
		return nil
	}
	if qe.stream != nil {
		return s.publishStreamRepl(qe, p, msg, id)
	}
	pubSeq := s.nextReplSeq()
	c := queue.Cmd{Op: queue.OpEnqueue, Now: nowMs(), TTL: messageTTL(msg.Header), Msg: msg,
		Publisher: queue.PublisherID(s.replPub), PubSeq: pubSeq}
	var done func(*GroupResult, error)
	if id != 0 {
		done = func(r *GroupResult, err error) {
			if err == nil && r.Err != nil {
				err = r.Err
			}
			if err == nil {
				for _, f := range r.Effects {
					if f.Kind == queue.EffReject && f.PubSeq == pubSeq {
						s.reply(id, amqp.PreconditionFailed, "rejected", 0, 0)
						return
					}
				}
				s.reply(id, 0, "", 0, 0)
				return
			}
			s.reply(id, amqp.InternalError, err.Error(), 0, 0)
		}
	}
	qe.mu.Lock()
	qe.stats.publish++
	qe.mu.Unlock()
	return p.submit(qe.queueCmd(&c), done)
}

// memberProposer returns this node's proposer of replicated queue qe's
// group for a peer's request id, or nil, the request refused, when this
// node is not a member (any more) or has none.
func (s *linkServer) memberProposer(qe *queueEntity, id uint64) *groupProposer {
	b := s.b
	var p *groupProposer
	if _, away := b.replAway(qe.repl.group); !away {
		p = b.proposer(qe.repl.group)
	}
	if p == nil && id != 0 {
		s.reply(id, amqp.InternalError, "not a member of the queue's data group", 0, 0)
	}
	return p
}

// nextReplSeq returns the next sequence of the link's publisher id (made
// at the first) in the groups' deduplication. Read loop only.
func (s *linkServer) nextReplSeq() uint64 {
	if s.replPub == 0 {
		var r [8]byte
		_, _ = rand.Read(r[:])
		s.replPub = binary.BigEndian.Uint64(r[:]) | 1
	}
	s.replSeq++
	return s.replSeq
}

// awayRefusal is a member's refusal of a peer's request for a replicated
// queue (consume, get) once it learnt it is no longer a member itself.
func awayRefusal(qe *queueEntity, cls, mth uint16) error {
	return amqp.Errorf(amqp.NotFound, cls, mth, "quorum queue '%s' in vhost '%s' has no replica on this node (it was removed from data group %d): consume from one of its members",
		qe.name, qe.vhost.name, qe.repl.group)
}

// QuorumMembership changes the members of data groups; cmd/warren's
// QuorumGroups implements it. A change is recorded in the cluster's
// definitions (the groups' plan), then carried out by the group's leader
// (Raft AddVoter, RemoveServer) and the nodes concerned.
type QuorumMembership interface {
	// ChangeGroupMember adds node to (add) or removes it from the
	// members of data group g.
	ChangeGroupMember(g uint64, node string, add bool) error
}

// MemberChange is the outcome of a membership verb on a queue: the queue's
// data group and its members per the plan afterwards.
type MemberChange struct {
	Group   uint64   `json:"group"`
	Members []string `json:"members"`
}

// ChangeQueueMember is add_member / delete_member (stream: add_replica /
// delete_replica) of queue name in vhostName: node joins or leaves the
// data group the queue is replicated in. Queues share groups, so every
// queue of that group gets (or loses) the replica on node.
func (b *Broker) ChangeQueueMember(vhostName, name, node string, add, stream bool) (MemberChange, error) {
	v := b.vhost(vhostName)
	if v == nil {
		return MemberChange{}, fmt.Errorf("vhost '%s': %w", vhostName, ErrNotFound)
	}
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	if qe == nil {
		return MemberChange{}, fmt.Errorf("queue '%s' in vhost '%s': %w", name, vhostName, ErrNotFound)
	}
	switch {
	case stream && qe.stream == nil:
		return MemberChange{}, fmt.Errorf("queue '%s' in vhost '%s' is not a stream: %w", name, vhostName, ErrInvalid)
	case !stream && (qe.stream != nil || !quorumArg(qe.args)):
		return MemberChange{}, fmt.Errorf("queue '%s' in vhost '%s' is not a quorum queue: %w", name, vhostName, ErrInvalid)
	case qe.repl == nil && !b.replicated():
		return MemberChange{}, fmt.Errorf("queue '%s' in vhost '%s' is not replicated: this node has no data groups (not clustered, or --quorum-groups 0): %w", name, vhostName, ErrInvalid)
	case qe.repl == nil:
		return MemberChange{}, fmt.Errorf("queue '%s' in vhost '%s' is not replicated (it was declared before the cluster planned its data groups): %w", name, vhostName, ErrInvalid)
	}
	m, ok := b.cfg.QuorumGroups.(QuorumMembership)
	if !ok {
		return MemberChange{}, fmt.Errorf("this node cannot change data groups: %w", ErrInvalid)
	}
	if err := m.ChangeGroupMember(qe.repl.group, node, add); err != nil {
		return MemberChange{}, fmt.Errorf("%w: %w", err, ErrInvalid)
	}
	return b.groupMembers(qe.repl.group), nil
}

// ChangeAllGroupsMember is grow (add) / shrink: node joins or leaves every
// data group (shrink leaves alone a group node is the last member of).
func (b *Broker) ChangeAllGroupsMember(node string, add bool) ([]MemberChange, error) {
	if !b.replicated() {
		return nil, fmt.Errorf("this node has no data groups: %w", ErrInvalid)
	}
	m, ok := b.cfg.QuorumGroups.(QuorumMembership)
	if !ok {
		return nil, fmt.Errorf("this node cannot change data groups: %w", ErrInvalid)
	}
	var out []MemberChange
	for _, g := range b.cfg.QuorumGroups.Groups() {
		if add == slices.Contains(g.Members, node) || !add && len(g.Members) == 1 {
			continue
		}
		if err := m.ChangeGroupMember(g.ID, node, add); err != nil {
			return out, fmt.Errorf("%w: %w", err, ErrInvalid)
		}
		out = append(out, b.groupMembers(g.ID))
	}
	return out, nil
}

// groupMembers is group g's members per the plan as this node has it.
func (b *Broker) groupMembers(g uint64) MemberChange {
	mc := MemberChange{Group: g, Members: []string{}}
	for _, s := range b.cfg.QuorumGroups.Groups() {
		if s.ID == g {
			mc.Members = slices.Clone(s.Members)
		}
	}
	return mc
}
