package broker

import (
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/queue"
)

// Single-active-consumer groups of replicated streams. Which consumers are
// in a group (x-stream-consumer-name on a stream with
// x-single-active-consumer) and which one is active is part of the
// stream's replicated state, so every node agrees on it whichever node a
// member consumes through. Stream commands of the data group:
//
//	'J' name id partition tag   a consumer (id: replConsumerID, naming its
//	                            node and process) joins group name; the
//	                            stream's partition is its index in its super
//	                            stream (0 for a plain stream)
//	'L' name id                 it leaves (basic.cancel, channel closed)
//
// and the group's 'O' (consumers of a node, or of one of its earlier
// processes, gone: replWatch proposes it when the node has been down for
// replGoneAfter, as for quorum queues' consumers) takes the matching
// members out. After each, the group elects as RabbitMQ does for super
// stream consumer groups: members in the order they joined, member number
// partition mod members is active (on a plain stream the first). Each node
// applies the election to its own members (QueueGroup.sacLocal): the one
// elected becomes active and, when it takes over from another member or
// from one that left, resumes after the group's stored offset (named
// offsets are replicated: StreamStoreOffset); a member that joins a group
// with no active member starts where it asked. A member of this process
// that an 'O' took out while it lives here (the leader lost sight of this
// node) joins again; one the group has but this process no longer has
// (its leave was not taken) is proposed to leave.

// Stream ops of consumer groups.
const (
	streamOpJoin  = 'J'
	streamOpLeave = 'L'
)

// sacGroup is a consumer group of a replicated stream (replicated state).
type sacGroup struct {
	members []sacMember // in joining order
	active  queue.ConsumerID
}

type sacMember struct {
	id  queue.ConsumerID
	tag string
}

// sacLocal is one of this node's members of a replicated stream's group.
type sacLocal struct {
	key GroupQueueKey
	sc  *queue.StreamConsumer
	// consumeOk, until the consumer's join is applied here, sends its
	// basic.consume-ok (nil: sent, or not asked for): as in RabbitMQ, a
	// client's consume returns once the consumer is in its group, so the
	// order of the consumes is the order of the group's members.
	consumeOk func()
}

// answerJoinLocked sends the basic.consume-ok of local consumer id, if it
// waits for one. Hold g.mu.
func (g *QueueGroup) answerJoinLocked(id queue.ConsumerID) {
	if l, ok := g.sacLocal[id]; ok && l.consumeOk != nil {
		f := l.consumeOk
		l.consumeOk = nil
		g.sacLocal[id] = l
		f()
	}
}

// GroupStreamJoinCmd is the command adding consumer id (tag) to group name
// of stream k, whose index in its super stream is partition.
func GroupStreamJoinCmd(k GroupQueueKey, name string, id queue.ConsumerID, partition int, tag string) []byte {
	b := appendGroupKey([]byte{groupStreamCmd}, k)
	b = appendS(append(b, streamOpJoin), name)
	b = appendU(b, uint64(id))
	b = appendU(b, uint64(partition))
	return appendS(b, tag)
}

// GroupStreamLeaveCmd is the command taking consumer id out of group name
// of stream k.
func GroupStreamLeaveCmd(k GroupQueueKey, name string, id queue.ConsumerID) []byte {
	b := appendGroupKey([]byte{groupStreamCmd}, k)
	b = appendS(append(b, streamOpLeave), name)
	return appendU(b, uint64(id))
}

// applySACLocked applies a join or leave (op) to gs. Hold g.mu.
func (g *QueueGroup) applySACLocked(gs *groupStream, op byte, r *GroupResult, d *linkDecoder) {
	name := d.s()
	id := queue.ConsumerID(d.u())
	var partition uint64
	var tag string
	if op == streamOpJoin {
		partition = d.u()
		tag = d.s()
	}
	if d.err != nil || len(d.b) != 0 {
		r.Err = ErrGroupCommand
		return
	}
	if gs.sac == nil {
		gs.sac = map[string]*sacGroup{}
	}
	sg := gs.sac[name]
	if op == streamOpLeave {
		if sg == nil {
			return
		}
		sg.members = slices.DeleteFunc(sg.members, func(m sacMember) bool { return m.id == id })
		g.electLocked(gs, name, sg, 0)
		return
	}
	if sg == nil {
		sg = &sacGroup{}
		gs.sac[name] = sg
	}
	gs.partition = int(min(partition, 1<<30))
	if !slices.ContainsFunc(sg.members, func(m sacMember) bool { return m.id == id }) {
		sg.members = append(sg.members, sacMember{id: id, tag: tag})
	}
	// Its consume-ok before anything the election may deliver to it.
	g.answerJoinLocked(id)
	g.electLocked(gs, name, sg, id)
	if g.host != nil {
		b := g.host.b
		if uint64(id&replProcMask) == b.repl.prefix && g.sacLocal[id].sc == nil {
			// Gone here before its join was applied (the leave went
			// first, or was not taken).
			b.sacSubmit(g.host.group, GroupStreamLeaveCmd(gs.key, name, id), nil)
		}
	}
}

// electLocked makes member partition mod members of sg active and applies
// it to this node's members; joined is the member that just joined, if
// any. Hold g.mu.
func (g *QueueGroup) electLocked(gs *groupStream, name string, sg *sacGroup, joined queue.ConsumerID) {
	var want queue.ConsumerID
	if len(sg.members) > 0 {
		want = sg.members[gs.partition%len(sg.members)].id
	}
	old := sg.active
	if want == old {
		return
	}
	sg.active = want
	if len(sg.members) == 0 {
		delete(gs.sac, name)
	}
	if l, ok := g.sacLocal[old]; ok && l.key == gs.key {
		gs.s.SetActive(l.sc, false, false, 0)
	}
	if l, ok := g.sacLocal[want]; ok && l.key == gs.key {
		off, stored := gs.s.NamedOffset(name)
		gs.s.SetActive(l.sc, true, stored && (old != 0 || want != joined), off+1)
	}
}

// sacGoneLocked takes the members whose ids match (id&mask == value) out
// of the groups of every stream (an 'O'). Hold g.mu.
func (g *QueueGroup) sacGoneLocked(mask, value queue.ConsumerID) {
	for _, k := range slices.SortedFunc(maps.Keys(g.streams), compareKeys) {
		gs := g.streams[k]
		for _, name := range slices.Sorted(maps.Keys(gs.sac)) {
			sg := gs.sac[name]
			var alive []queue.ConsumerID
			sg.members = slices.DeleteFunc(sg.members, func(m sacMember) bool {
				if m.id&mask != value {
					return false
				}
				if _, ok := g.sacLocal[m.id]; ok {
					alive = append(alive, m.id)
				}
				return true
			})
			g.electLocked(gs, name, sg, 0)
			if g.host == nil {
				continue
			}
			for _, id := range alive {
				l := g.sacLocal[id]
				g.host.b.log.Info("stream consumer taken out of its group while alive here; joining again",
					zap.Stringer("stream", k), zap.String("consumer-tag", l.sc.Tag))
				g.host.b.sacJoin(g.host.group, k, id, gs.partition, l.sc)
			}
		}
		if g.host != nil && len(gs.s.Consumers()) > 0 {
			g.host.dispatchLocked(gs)
		}
	}
}

// sacIDsLocked appends the ids of the streams' group members (replWatch
// looks for those of nodes gone). Hold g.mu.
func (g *QueueGroup) sacIDsLocked(ids []queue.ConsumerID) []queue.ConsumerID {
	for _, gs := range g.streams {
		for _, sg := range gs.sac {
			for _, m := range sg.members {
				ids = append(ids, m.id)
			}
		}
	}
	return ids
}

// syncLocalLocked applies the groups of restored streams to this node's
// members (after a snapshot restore moved them over). Hold g.mu.
func (g *QueueGroup) syncLocalLocked() {
	for id, l := range g.sacLocal {
		// The joins a restored snapshot holds were not applied here:
		// the consumers still waiting for their consume-ok get it now
		// (one whose join is still to come in the log, a little early).
		g.answerJoinLocked(id)
		gs := g.streams[l.key]
		if gs == nil {
			continue
		}
		sg := gs.sac[l.sc.Name]
		gs.s.SetActive(l.sc, sg != nil && sg.active == id, false, 0)
	}
}

// appendSACSnapshot appends the consumer groups of the group's streams:
// count, then per stream with groups (sorted by key) its key, partition
// and groups (sorted by name: name, active, members). Hold g.mu.
func (g *QueueGroup) appendSACSnapshot(b []byte) []byte {
	var keys []GroupQueueKey
	for k, gs := range g.streams {
		if len(gs.sac) > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	b = appendU(b, uint64(len(keys)))
	for _, k := range keys {
		gs := g.streams[k]
		b = appendGroupKey(b, k)
		b = appendU(b, uint64(gs.partition))
		names := slices.Sorted(maps.Keys(gs.sac))
		b = appendU(b, uint64(len(names)))
		for _, n := range names {
			sg := gs.sac[n]
			b = appendS(b, n)
			b = appendU(b, uint64(sg.active))
			b = appendU(b, uint64(len(sg.members)))
			for _, m := range sg.members {
				b = appendS(appendU(b, uint64(m.id)), m.tag)
			}
		}
	}
	return b
}

// restoreSAC decodes appendSACSnapshot's part into streams.
func restoreSAC(d *linkDecoder, streams map[GroupQueueKey]*groupStream) {
	n := d.u()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = ErrGroupCommand
		return
	}
	for range n {
		k := readGroupKey(d)
		partition := d.u()
		ng := d.u()
		if d.err != nil || ng > uint64(len(d.b)) {
			d.err = ErrGroupCommand
			return
		}
		gs := streams[k]
		sac := make(map[string]*sacGroup, ng)
		for range ng {
			name := d.s()
			sg := &sacGroup{active: queue.ConsumerID(d.u())}
			nm := d.u()
			if d.err != nil || nm > uint64(len(d.b)) {
				d.err = ErrGroupCommand
				return
			}
			for range nm {
				id := queue.ConsumerID(d.u())
				sg.members = append(sg.members, sacMember{id: id, tag: d.s()})
			}
			sac[name] = sg
		}
		if gs != nil {
			gs.partition, gs.sac = int(min(partition, 1<<30)), sac
		}
	}
}

// sacJoin registers sc, this node's consumer id of replicated stream k in
// group g, and proposes its join.
func (b *Broker) sacJoin(g uint64, k GroupQueueKey, id queue.ConsumerID, partition int, sc *queue.StreamConsumer) {
	cmd := GroupStreamJoinCmd(k, sc.Name, id, partition, sc.Tag)
	b.sacSubmit(g, cmd, func() bool {
		m := b.replMachine(g)
		if m == nil {
			return false
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.sacLocal[id].sc == sc
	})
}

// sacSubmit proposes cmd to group g, again after replRetryAfter while the
// group does not take it and still (when set) says so.
func (b *Broker) sacSubmit(g uint64, cmd []byte, still func() bool) {
	p := b.proposer(g)
	if p == nil {
		return
	}
	p.submit(cmd, func(_ *GroupResult, err error) {
		if err == nil {
			return
		}
		r := &b.repl
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return
		}
		time.AfterFunc(replRetryAfter, func() {
			if still == nil || still() {
				b.sacSubmit(g, cmd, still)
			}
		})
	})
}

// replMachine returns group g's state machine on this node, if any.
func (b *Broker) replMachine(g uint64) *QueueGroup {
	r := &b.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.machines[g]
}

// addSACLocked registers cons, a consumer of a group of replicated stream
// gs, as this node's (waiting until the group elects it); consumeOk, when
// set, is called once its join is applied here. Hold g.mu.
func (g *QueueGroup) addSACLocked(gs *groupStream, cons *consumer, consumeOk func()) {
	if g.sacLocal == nil {
		g.sacLocal = map[queue.ConsumerID]sacLocal{}
	}
	g.sacLocal[cons.ID] = sacLocal{key: gs.key, sc: cons.stream, consumeOk: consumeOk}
	gs.s.AddConsumer(cons.stream)
	gs.s.SetActive(cons.stream, false, false, 0)
}

// removeSAC takes cons, a member of a group of replicated stream qe, off
// this node and proposes its leave.
func (b *Broker) removeSAC(qe *queueEntity, cons *consumer) {
	g := b.replStream(qe)
	if g != nil {
		g.mu.Lock()
		if l, ok := g.sacLocal[cons.ID]; ok && l.sc == cons.stream {
			delete(g.sacLocal, cons.ID)
		}
		if gs := g.streams[qe.repl.key]; gs != nil {
			gs.s.RemoveConsumer(cons.stream)
			if g.host != nil {
				g.host.dispatchLocked(gs)
			}
		}
		g.mu.Unlock()
	}
	b.sacSubmit(qe.repl.group, GroupStreamLeaveCmd(qe.repl.key, cons.stream.Name, cons.ID), nil)
}
