package broker

import (
	"errors"
	"sync"

	"github.com/warrenmq/warren/amqp"
)

// confirmTracker orders publisher confirms when some publishes wait for
// the journal: an ack covers a publish only once it and every earlier one
// are settled.
type confirmTracker struct {
	mu sync.Mutex
	// base is the sequence number of pending[0].
	base uint64
	// pending counts the journal writes each publish still waits for; -1
	// marks a publish to nack.
	pending []int32
	// sent is the highest sequence number confirmed to the client.
	sent uint64
	// closed is set when the channel closes: nothing more is sent.
	closed bool
	// queued is set while the channel waits in its connection's list of
	// channels with journal completions to confirm.
	queued bool
	// confirmed counts the publishes confirmed (acked or nacked).
	confirmed uint64
	// notify, set before the tracker is used and never after, is
	// signalled (without blocking) after each completion: the delayed
	// scheduler waits on it for its own routings' confirms (take).
	notify chan struct{}
	// settles, set with notify, is an error that counts as success: a
	// queue's refusal under its overflow policy is that queue's decision
	// about a message, not a failure to store it.
	settles error
}

// add registers publish seq, which waits for waits journal writes.
func (t *confirmTracker) add(seq uint64, waits int32) {
	t.mu.Lock()
	if len(t.pending) == 0 {
		t.base = seq
	}
	t.pending = append(t.pending, waits)
	t.mu.Unlock()
}

// hold makes publish seq wait for one more journal write.
func (t *confirmTracker) hold(seq uint64) {
	t.mu.Lock()
	if i := int(seq - t.base); i >= 0 && i < len(t.pending) && t.pending[i] > 0 {
		t.pending[i]++
	}
	t.mu.Unlock()
}

// close stops the tracker: the channel is gone.
func (t *confirmTracker) close() {
	t.mu.Lock()
	t.closed = true
	t.pending = nil
	t.mu.Unlock()
}

// done records that one journal write of publish seq finished; a failed
// write turns the confirm into a nack.
func (t *confirmTracker) done(seq uint64, err error) {
	t.mu.Lock()
	i := int(seq - t.base)
	if i >= 0 && i < len(t.pending) && t.pending[i] > 0 {
		if err != nil && (t.settles == nil || !errors.Is(err, t.settles)) {
			t.pending[i] = -1
		} else {
			t.pending[i]--
		}
	}
	t.mu.Unlock()
	if t.notify != nil {
		select {
		case t.notify <- struct{}{}:
		default:
		}
	}
}

// take drops the settled prefix of publishes, as flush does, without
// sending anything: it calls fn with each one's sequence number, in
// order, and whether every write it waited for succeeded. For a channel
// that confirms to the broker itself (the delayed scheduler's).
func (t *confirmTracker) take(fn func(seq uint64, ok bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for n < len(t.pending) && t.pending[n] <= 0 {
		fn(t.base+uint64(n), t.pending[n] == 0)
		n++
	}
	t.base += uint64(n)
	t.pending = t.pending[:copy(t.pending, t.pending[n:])]
}

// flush sends the acks and nacks that are due: the settled prefix as one
// basic.ack (multiple when it covers several), each failed publish as a
// basic.nack.
func (t *confirmTracker) flush(c *conn, channel uint16) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	n := 0
	var ackUpTo uint64
	for n < len(t.pending) && t.pending[n] <= 0 {
		seq := t.base + uint64(n)
		if t.pending[n] < 0 {
			if ackUpTo > t.sent {
				c.send(channel, &amqp.BasicAck{DeliveryTag: ackUpTo, Multiple: ackUpTo-t.sent > 1})
			}
			c.send(channel, &amqp.BasicNack{DeliveryTag: seq})
			t.sent = seq
			ackUpTo = 0
		} else {
			ackUpTo = seq
		}
		n++
	}
	if ackUpTo > t.sent {
		c.send(channel, &amqp.BasicAck{DeliveryTag: ackUpTo, Multiple: ackUpTo-t.sent > 1})
		t.sent = ackUpTo
	}
	if n > 0 {
		t.confirmed += uint64(n)
		// Drop the settled prefix. Shifting the rest costs what is left,
		// so it is done only when that is no more than what was dropped
		// (or little): with a long window of publishes waiting for the
		// journal, the rest is resliced instead, and append moves it once
		// the capacity runs out.
		t.base += uint64(n)
		if rest := len(t.pending) - n; rest <= max(n, 64) {
			copy(t.pending, t.pending[n:])
			t.pending = t.pending[:rest]
		} else {
			t.pending = t.pending[n:]
		}
	}
}

// confirmReady queues ch for the writer to send the confirms its journal
// writes completed. Any goroutine.
func (c *conn) confirmReady(ch *channel) {
	ch.confirms.mu.Lock()
	queued := ch.confirms.queued
	ch.confirms.queued = true
	ch.confirms.mu.Unlock()
	if queued {
		return
	}
	c.asyncMu.Lock()
	c.asyncConfirms = append(c.asyncConfirms, ch)
	c.asyncMu.Unlock()
	c.out.wake()
}

// flushAsyncConfirms sends the confirms of journal completions. Writer
// goroutine.
func (c *conn) flushAsyncConfirms() {
	c.asyncMu.Lock()
	list := c.asyncConfirms
	c.asyncConfirms = nil
	c.asyncMu.Unlock()
	for _, ch := range list {
		ch.confirms.mu.Lock()
		ch.confirms.queued = false
		ch.confirms.mu.Unlock()
		ch.confirms.flush(c, ch.id)
	}
}
