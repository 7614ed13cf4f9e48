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

// head is the entry pop would return; l must not be empty.
func (l *lane) head() *slot {
	if len(l.requeued) > 0 {
		return &l.requeued[0]
	}
	return l.ready.front()
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
		if s := l.ready.at(i); s.flags&flagTaken == 0 {
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
