package queue

// Message TTL, as in RabbitMQ's classic queues: a message expires at its
// publish time plus the smaller of the queue's x-message-ttl and its own
// expiration property, and is removed when it reaches the head of the
// queue (of its priority's lane): an expired message behind a live one
// waits. Nothing expired is ever delivered: DispatchAt and GetAt remove
// expired heads before they deliver.
//
// A TTL of 0 means "deliver now or never": the message is kept only if the
// queue has no other ready message and a consumer has credit, and then only
// for the current millisecond (Expires = now+1) so that the DispatchAt that
// follows the publish at the same now delivers it.

// Expire removes the expired messages at the head of each lane at now
// (unix ms) and returns them as dead letters (reason "expired").
func (q *Queue) Expire(now int64) []DeadLetter {
	var dls []DeadLetter
	q.expire(now, &dls)
	return dls
}

// NextExpiry is the earliest Expires among the messages at the head of
// each lane, 0 if none of them expires: when to call Expire next. Messages
// further back cannot expire before they reach the head.
func (q *Queue) NextExpiry() int64 {
	var next int64
	q.lanes(func(l *lane) {
		if l.len() == 0 {
			return
		}
		if _, _, x := l.head(); x != 0 && (next == 0 || x < next) {
			next = x
		}
	})
	return next
}

func (q *Queue) expire(now int64, dls *[]DeadLetter) {
	q.lanes(func(l *lane) {
		for l.len() > 0 && l.headExpired(now) {
			*dls = append(*dls, DeadLetter{Entry: q.remove(l).entry(), Reason: ReasonExpired})
		}
	})
}

// expireNext removes expired messages from the head of the queue until the
// next one to be delivered is live.
func (q *Queue) expireNext(now int64, dls *[]DeadLetter) {
	for q.Ready() > 0 {
		l := q.next()
		if !l.headExpired(now) {
			return
		}
		*dls = append(*dls, DeadLetter{Entry: q.remove(l).entry(), Reason: ReasonExpired})
	}
}

// NextTick is when (unix ms) an OpTick would next change something, 0 if
// none would: the earliest expiry at the heads (NextExpiry), and with
// Config.Expires the queue's own expiry (ExpiresAt), or now when no use is
// recorded yet (the first tick records one) or consumers keep it in use
// (the tick records a use). An owner that issues ticks by the clock (a
// replicated queue's leader) needs no timer for a queue where it is 0.
func (q *Queue) NextTick(now int64) int64 {
	next := q.NextExpiry()
	if q.cfg.Expires > 0 && !q.expired {
		at := q.lastUsed + q.cfg.Expires
		if q.lastUsed == 0 {
			at = now
		}
		if next == 0 || at < next {
			next = at
		}
	}
	return next
}
