package broker

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
)

// Consumer timeout, as RabbitMQ 4.x: a delivery to a consumer left
// unacknowledged longer than the timeout (Config.ConsumerTimeout, or the
// queue's x-consumer-timeout) cancels the consumer, telling the client
// with basic.cancel, and returns its unacknowledged deliveries to their
// queues; a client that does not understand basic.cancel from the server
// has the channel closed with 406 instead. A delivery only records the time of a coarse clock; one
// broker-owned ticker advances the clock and checks every channel.

// consumerTimeouts is the broker's consumer timeout clock.
type consumerTimeouts struct {
	// now is the coarse clock in unix ms, advanced by the checker.
	now atomic.Int64
}

// consumerTimeoutTick is how often the checker runs for a timeout of d.
func consumerTimeoutTick(d time.Duration) time.Duration {
	return min(max(d/4, 10*time.Millisecond), time.Second)
}

// monitorConsumerTimeouts advances the clock and checks the channels until
// stop closes. Run by Serve.
func (b *Broker) monitorConsumerTimeouts(stop <-chan struct{}) {
	b.ct.now.Store(nowMs())
	tick := time.NewTicker(consumerTimeoutTick(b.cfg.ConsumerTimeout))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := nowMs()
		b.ct.now.Store(now)
		for _, ch := range b.mgmt.channels() {
			ch.checkConsumerTimeouts(now)
		}
	}
}

// checkConsumerTimeouts cancels the consumers of ch with a delivery older
// than their timeout. Checker goroutine, no lock held.
//
// As RabbitMQ (rabbit_channel:evaluate_consumer_timeout), it looks only at
// the channel's oldest outstanding consumer delivery: the unacked list is
// in delivery order, so nothing newer can have waited longer. A consumer
// with a shorter timeout than the one whose delivery is oldest (their
// queues set different x-consumer-timeouts) is looked at once that older
// delivery is settled or timed out. A delivery that cannot time out (its
// consumer has no timeout, or was cancelled) is marked so and passed.
func (ch *channel) checkConsumerTimeouts(now int64) {
	def := ch.c.b.cfg.ConsumerTimeout.Milliseconds()
	for {
		ch.mu.Lock()
		if ch.closed {
			ch.mu.Unlock()
			return
		}
		p := ch.unacked.oldestTimed()
		if p == nil {
			ch.mu.Unlock()
			return
		}
		cons := p.cons
		limit := def
		if cons.timeout > 0 {
			limit = cons.timeout
		}
		if limit <= 0 || ch.consumers[cons.Tag] != cons {
			p.at = 0
			ch.mu.Unlock()
			continue
		}
		late := now-p.at > limit
		ch.mu.Unlock()
		if !late {
			return
		}
		ch.timeOut(cons)
		if ch.closing.Load() {
			return
		}
	}
}

// timeOut cancels cons for a delivery that timed out and requeues its
// unacknowledged deliveries, telling the client with basic.cancel. A
// client without consumer_cancel_notify cannot be told: the channel is
// closed with 406 instead, as RabbitMQ does, which requeues every
// unacknowledged delivery of the channel.
func (ch *channel) timeOut(cons *consumer) {
	if !ch.c.capCancelNotify {
		limit := ch.c.b.cfg.ConsumerTimeout.Milliseconds()
		if cons.timeout > 0 {
			limit = cons.timeout
		}
		ch.c.log.Info("consumer timed out, closing its channel", zap.String("consumer-tag", cons.Tag))
		ch.closeWith(amqp.Errorf(amqp.PreconditionFailed, 0, 0,
			"delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. This timeout value can be configured, see consumers doc guide to learn more",
			ch.id, limit))
		return
	}
	ch.mu.Lock()
	if ch.closed || ch.consumers[cons.Tag] != cons {
		ch.mu.Unlock()
		return
	}
	delete(ch.consumers, cons.Tag)
	mine := ch.unacked.takeIf(func(p *pending) bool { return p.cons == cons })
	ch.mu.Unlock()
	ch.c.log.Info("consumer timed out", zap.String("consumer-tag", cons.Tag))
	cons.qe.removeConsumer(cons)
	ch.c.send(ch.id, &amqp.BasicCancel{ConsumerTag: cons.Tag, NoWait: true})
	ch.requeue(mine)
}
