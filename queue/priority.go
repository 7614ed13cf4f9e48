package queue

// A priority queue (Config.MaxPriority > 0) keeps one lane per priority.
// The next delivery comes from the highest non-empty lane; within a lane
// requeued messages come first, in Seq order, then new ones in publish
// order. A message's priority is its priority property capped at
// MaxPriority (RabbitMQ: a message without one has priority 0).

// lane is the ready messages of one priority.
type lane struct {
	requeued returned
	ready    ring
}

func (l *lane) len() int { return l.ready.len() + len(l.requeued) }

// head is the message, body size and expiry of the entry pop would
// return; l must not be empty.
func (l *lane) head() (*Message, uint32, int64) {
	if len(l.requeued) > 0 {
		s := &l.requeued[0]
		return s.msg, s.size, s.expires()
	}
	c := l.ready.front()
	return c.msg, c.size, c.expires()
}

// headExpired reports whether the head of l, which must not be empty, has
// expired at now.
func (l *lane) headExpired(now int64) bool {
	_, _, x := l.head()
	return x != 0 && x <= now
}

func (l *lane) pop() slot {
	if len(l.requeued) > 0 {
		return l.requeued.pop()
	}
	return l.ready.pop()
}

func (l *lane) clear() {
	l.ready.clear()
	l.requeued = nil
}

// each calls fn with every entry of l: the requeued ones (in heap order),
// then the ready list in order.
func (l *lane) each(fn func(Entry)) {
	for _, s := range l.requeued {
		fn(s.entry())
	}
	for i := 0; i < l.ready.len(); i++ {
		if !l.ready.at(i).taken() {
			s := l.ready.slotAt(i)
			fn(s.entry())
		}
	}
}

// priority is the lane index of m in q.
func (q *Queue) priority(m *Message) int {
	if q.hi == nil {
		return 0
	}
	p := m.Priority
	if p > q.cfg.MaxPriority {
		p = q.cfg.MaxPriority
	}
	return int(p)
}

// lanes calls fn with each lane, highest priority first.
func (q *Queue) lanes(fn func(*lane)) {
	for i := len(q.hi) - 1; i >= 0; i-- {
		fn(&q.hi[i])
	}
	fn(&q.base)
}
