package queue

// Length limits, as in RabbitMQ: x-max-length and x-max-length-bytes count
// ready messages only (not unacknowledged ones) and body bytes. When a
// publish would exceed them, x-overflow decides: DropHead enqueues and then
// drops from the head (the next message to be delivered, so in a priority
// queue the oldest of the highest priority, as RabbitMQ does), while
// RejectPublish and RejectPublishDLX refuse the new message. A new message
// that a consumer can take at once is not dropped by DropHead (RabbitMQ
// delivers before it enqueues); RejectPublish refuses regardless.

// PublishAt publishes m at time now (unix ms). perMessageTTL is the
// message's expiration property in ms, -1 if it has none. accepted is
// false when the length limits refuse m (the publisher gets a basic.nack);
// then seq is 0. dropped is what the publish removed: expired heads
// (reason "expired"), heads dropped for room or m itself when refused with
// RejectPublishDLX (reason "maxlen"), or m itself when its TTL of 0 ran out
// at once (reason "expired"; m is accepted and has a seq, but is not kept).
// With now 0 no TTL applies.
func (q *Queue) PublishAt(m *Message, now int64, perMessageTTL int64) (seq uint64, accepted bool, dropped []DeadLetter) {
	if q.cfg.plain() && perMessageTTL < 0 {
		q.nextSeq++
		q.push(slot{msg: m, seq: q.nextSeq, size: uint32(m.Size())})
		return q.nextSeq, true, nil
	}
	if now != 0 {
		q.expire(now, &dropped)
	}
	if q.cfg.Overflow != DropHead && q.over(1, int64(m.Size())) {
		if q.cfg.Overflow == RejectPublishDLX && q.cfg.DeadLetter {
			dropped = append(dropped, DeadLetter{Entry: Entry{Msg: m, Size: m.Size()}, Reason: ReasonMaxLen})
		}
		return 0, false, dropped
	}
	q.nextSeq++
	e := slot{msg: m, seq: q.nextSeq, size: uint32(m.Size())}
	ttl := q.cfg.MessageTTL
	if perMessageTTL >= 0 && (ttl < 0 || perMessageTTL < ttl) {
		ttl = perMessageTTL
	}
	immediate := false
	if ttl == 0 || (q.cfg.MaxLength >= 0 || q.cfg.MaxLengthBytes >= 0) {
		immediate = q.Ready() == 0 && q.canDeliver()
	}
	if now != 0 {
		switch {
		case ttl == 0 && !immediate:
			return e.seq, true, append(dropped, DeadLetter{Entry: e.entry(), Reason: ReasonExpired})
		case ttl == 0:
			e.setExpires(now + 1)
		case ttl > 0:
			e.setExpires(now + ttl)
		}
	}
	q.push(e)
	q.dropHead(immediate, &dropped)
	return e.seq, true, dropped
}

// over reports whether n more ready messages of size more bytes would
// exceed a length limit.
// The discards (at-least-once dead letters not yet confirmed) count too.
func (q *Queue) over(n int, size int64) bool {
	n += len(q.discards.list)
	size += q.discards.bytes
	return (q.cfg.MaxLength >= 0 && int64(q.Ready()+n) > q.cfg.MaxLength) ||
		(q.cfg.MaxLengthBytes >= 0 && q.readyLen+size > q.cfg.MaxLengthBytes)
}

// dropHead drops heads while over a limit under DropHead. With keepLast a
// sole remaining message, about to be delivered, stays.
func (q *Queue) dropHead(keepLast bool, dls *[]DeadLetter) {
	if q.cfg.Overflow != DropHead {
		return
	}
	for q.Ready() > 0 && q.over(0, 0) {
		if keepLast && q.Ready() == 1 {
			return
		}
		*dls = append(*dls, DeadLetter{Entry: q.remove(q.next()).entry(), Reason: ReasonMaxLen})
	}
}
