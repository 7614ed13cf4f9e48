package queue

// Gate is a limit that lives outside the queue and is shared by several
// consumers: a channel-wide prefetch, channel.flow, or the outbound buffer
// of the consumer's connection. The queue asks it once per delivery it is
// about to make, with the body size of the message it would deliver;
// Acquire reserves room for that delivery or reports that there is none,
// in which case the owner of the gate must call the queue's Dispatch again
// once room appears.
type Gate interface {
	Acquire(size int) bool
}

// ConsumerID names a consumer of a queue in commands and effects. The
// owner assigns them and never reuses one for the queue; 0 is no consumer
// (basic.get).
type ConsumerID uint64

// Consumer is one basic.consume on a queue.
type Consumer struct {
	// ID names the consumer in commands and effects (Apply, Snapshot).
	ID ConsumerID
	// Tag is the consumer tag, unique on its channel.
	Tag string
	// NoAck consumers settle on delivery; prefetch does not apply to them.
	NoAck bool
	// Exclusive consumers are the only consumer of their queue.
	Exclusive bool
	// Prefetch is the per-consumer prefetch count (0 = unlimited).
	Prefetch int
	// Gate, when set, is asked before every delivery. It is this node's
	// limit, not part of the queue's state: Apply never sets one, and
	// Snapshot does not record it.
	Gate Gate
	// Priority is the consumer priority (x-priority argument, default 0):
	// consumers of a higher priority get messages while they have credit;
	// lower ones only when all higher ones are blocked. It must not change
	// while the consumer is registered.
	Priority int

	unacked int
	// gone is set once the consumer is removed from a queue with message
	// groups; owned is the groups it owns that have ready messages
	// (groups.go).
	gone  bool
	owned *groupFIFO
}

// Unacked is how many deliveries to this consumer await settlement.
func (c *Consumer) Unacked() int { return c.unacked }

func (c *Consumer) hasCredit() bool {
	if c.NoAck {
		return true
	}
	return c.Prefetch == 0 || c.unacked < c.Prefetch
}

// take reports whether c can receive one delivery of size bytes now,
// reserving room in its gate if it can.
func (c *Consumer) take(size int) bool {
	return c.hasCredit() && (c.Gate == nil || c.Gate.Acquire(size))
}

// group is the consumers of one priority, in registration order, with
// their round-robin position.
type group struct {
	prio   int
	cs     []*Consumer
	cursor int
}

// AddConsumer registers c. An exclusive consumer needs a queue without
// consumers, and no consumer may join a queue that has an exclusive one.
func (q *Queue) AddConsumer(c *Consumer) error {
	if len(q.consumers) > 0 && (c.Exclusive || q.consumers[0].Exclusive) {
		return ErrExclusiveConsumer
	}
	q.consumers = append(q.consumers, c)
	if c.Priority != 0 {
		q.prioCount++
	}
	q.addToGroup(c)
	return nil
}

// addToGroup adds c at the end of the group of its priority.
func (q *Queue) addToGroup(c *Consumer) {
	i := 0
	for i < len(q.groups) && q.groups[i].prio > c.Priority {
		i++
	}
	if i == len(q.groups) || q.groups[i].prio != c.Priority {
		q.groups = append(q.groups, group{})
		copy(q.groups[i+1:], q.groups[i:])
		q.groups[i] = group{prio: c.Priority}
	}
	q.groups[i].cs = append(q.groups[i].cs, c)
}

// RemoveConsumer unregisters c. Its unacknowledged deliveries stay with
// their owner, who settles or returns them. In a single-active-consumer
// queue the next consumer in registration order becomes active.
func (q *Queue) RemoveConsumer(c *Consumer) bool {
	if !removeFrom(&q.consumers, &q.cursor, c) {
		return false
	}
	if q.mg != nil {
		q.mg.consumerGone(c)
	}
	if c.Priority != 0 {
		q.prioCount--
	}
	for i := range q.groups {
		g := &q.groups[i]
		if g.prio != c.Priority {
			continue
		}
		removeFrom(&g.cs, &g.cursor, c)
		if len(g.cs) == 0 {
			last := len(q.groups) - 1
			copy(q.groups[i:], q.groups[i+1:])
			q.groups[last] = group{}
			q.groups = q.groups[:last]
		}
		break
	}
	return true
}

// removeFrom deletes c from *cs keeping the round-robin position *cursor
// on the consumer that was due next.
func removeFrom(cs *[]*Consumer, cursor *int, c *Consumer) bool {
	s := *cs
	for i, x := range s {
		if x != c {
			continue
		}
		copy(s[i:], s[i+1:])
		s[len(s)-1] = nil
		s = s[:len(s)-1]
		if *cursor > i {
			*cursor--
		}
		if *cursor >= len(s) {
			*cursor = 0
		}
		*cs = s
		return true
	}
	return false
}

// pickByPriority chooses the consumer for the next delivery among
// consumers with priorities: the highest priority with credit, round
// robin within it.
func (q *Queue) pickByPriority() *Consumer {
	for gi := range q.groups {
		g := &q.groups[gi]
		n := len(g.cs)
		for i := 0; i < n; i++ {
			cand := g.cs[(g.cursor+i)%n]
			if cand.take(q.headSize()) {
				g.cursor = (g.cursor + i + 1) % n
				return cand
			}
		}
	}
	return nil
}

// canDeliver reports whether some consumer that may receive has credit
// (gates are not asked: that would reserve room).
func (q *Queue) canDeliver() bool {
	if q.cfg.SingleActiveConsumer {
		return len(q.consumers) > 0 && q.consumers[0].hasCredit()
	}
	for _, c := range q.consumers {
		if c.hasCredit() {
			return true
		}
	}
	return false
}
