package broker

import (
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Quorum queues on a single node. A quorum queue (x-queue-type=quorum) is
// the classic queue state machine with quorum semantics, as RabbitMQ's
// rabbit_quorum_queue gives them with one replica: always durable, never
// exclusive or auto-delete (406 otherwise); every message is written to
// the store before it is confirmed, whatever its delivery mode; a
// redelivered message carries x-delivery-count (how often it was
// delivered before); x-delivery-limit dead-letters poison messages; the
// arguments quorum queues do not take are refused naming the type.
// Replication across nodes is the cluster's (DESIGN.md); a single node
// applies the commands locally.

// quorumUnsupportedArgs are arguments RabbitMQ refuses on quorum queues
// ("of queue type rabbit_quorum_queue").
var quorumUnsupportedArgs = []string{
	"x-max-priority", "x-queue-mode", "x-queue-master-locator", "x-queue-version",
	"x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
}

// deliveryMessage is the message a delivery of e from qe carries: the
// publisher's, or from a quorum queue the same with x-delivery-count set
// on redeliveries — and on every basic.get (get), where RabbitMQ 3.10 sets
// it to 0 the first time too.
func (qe *queueEntity) deliveryMessage(e *queue.Entry, get bool) *queue.Message {
	if !qe.quorum || (e.Deliveries <= 1 && !get) {
		return e.Msg
	}
	return countedRedelivery(e)
}

// countedRedelivery is e's message with x-delivery-count set.
func countedRedelivery(e *queue.Entry) *queue.Message {
	var h amqp.ContentHeader
	if err := amqp.DecodeContentHeader(e.Msg.Header, &h); err != nil {
		return e.Msg
	}
	hdrs := make(amqp.Table, len(h.Properties.Headers)+1)
	for k, v := range h.Properties.Headers {
		hdrs[k] = v
	}
	hdrs["x-delivery-count"] = int64(e.Deliveries - 1)
	h.Properties.Headers = hdrs
	if h.Properties.Flags != 0 {
		h.Properties.Flags |= amqp.FlagHeaders
	}
	out, err := h.AppendTo(make([]byte, 0, len(e.Msg.Header)+32))
	if err != nil {
		return e.Msg
	}
	return withHeader(e.Msg, out)
}

// typeName is qe's queue type as RabbitMQ names it.
func (qe *queueEntity) typeName() string {
	switch {
	case qe.stream != nil:
		return "stream"
	case qe.quorum:
		return "quorum"
	}
	return "classic"
}
