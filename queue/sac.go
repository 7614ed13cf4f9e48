package queue

// Single active consumer (Config.SingleActiveConsumer): every consumer may
// register, but only the first in registration order receives messages;
// when it is removed the next one takes over. Consumer priorities are not
// consulted. Messages delivered to a former active consumer stay its own
// until settled or returned.

// ActiveConsumer is the consumer that receives messages in a
// single-active-consumer queue, nil if the queue has no consumer or is not
// such a queue.
func (q *Queue) ActiveConsumer() *Consumer {
	if !q.cfg.SingleActiveConsumer || len(q.consumers) == 0 {
		return nil
	}
	return q.consumers[0]
}

// pickActive returns the active consumer if it can take a delivery now.
func (q *Queue) pickActive() *Consumer {
	if c := q.consumers[0]; c.take(q.headSize()) {
		return c
	}
	return nil
}
