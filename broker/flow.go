package broker

import "time"

// Queue flow control: a publisher faster than the consumers of a queue
// is slowed by TCP backpressure instead of growing the queue without
// bound. When a publish leaves a queue that has consumers with more than
// flowHigh ready messages, the publisher's reader stops reading until the
// backlog falls to flowLow or flowWait passes, whichever is first. Queues
// without consumers are not throttled (nothing would drain them), and a
// connection that consumes is never held, so that its own acks keep
// flowing.
const (
	flowHigh = 8192
	flowLow  = flowHigh / 2
	flowWait = 50 * time.Millisecond
)

// drainedLocked returns the channel closed when the backlog falls to
// flowLow. Hold qe.mu.
func (qe *queueEntity) drainedLocked() chan struct{} {
	if qe.drained == nil {
		qe.drained = make(chan struct{})
	}
	return qe.drained
}

// holdPublisher blocks the reader until drained closes or flowWait
// passes. Reader goroutine; no lock held.
func (c *conn) holdPublisher(drained chan struct{}) {
	if c.consuming() {
		return
	}
	if c.flowTimer == nil {
		c.flowTimer = time.NewTimer(flowWait)
	} else {
		c.flowTimer.Reset(flowWait)
	}
	select {
	case <-drained:
		// Go 1.23 timers: Stop leaves no stale tick behind.
		c.flowTimer.Stop()
	case <-c.flowTimer.C:
	}
}

// consuming reports whether any channel of the connection has consumers.
// Reader goroutine.
func (c *conn) consuming() bool {
	for _, ch := range c.channels {
		ch.mu.Lock()
		n := len(ch.consumers)
		ch.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}
