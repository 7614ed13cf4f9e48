package queue

// Message is one published message. It is immutable once built and may be
// shared by every queue it was routed to.
type Message struct {
	// Exchange and RoutingKey are those of the basic.publish that carried it.
	Exchange   string
	RoutingKey string
	// Header is the content-header frame payload as the publisher sent it
	// (class id, weight, body size, property flags and properties). It is
	// re-sent unchanged with every delivery, so properties and header tables
	// reach consumers byte for byte.
	Header []byte
	// Body is the message body, copied once out of the read buffer.
	Body []byte
	// Persistent is true for delivery-mode 2.
	Persistent bool
	// Priority is the priority property (0 when absent).
	Priority uint8
}

// Size is the body size in bytes, the unit of RabbitMQ's message_bytes.
func (m *Message) Size() int { return len(m.Body) }

// Entry is a message as one queue holds it.
type Entry struct {
	Msg *Message
	// Seq is the message's position in this queue, increasing with each
	// publish. Requeued messages keep their Seq and so their place.
	Seq uint64
	// Redelivered is set once the message has been delivered and returned.
	Redelivered bool
	// Deliveries counts how often the message was handed to a consumer.
	Deliveries uint32
	// Expires is when the message expires, in unix ms (0 = never): the
	// publish time plus the smaller of the queue's and the message's TTL.
	// A message is expired at any now >= Expires.
	Expires int64
	// Spilled is set when the owner wrote the message to its paging store
	// to page it out (see Queue.PageOut): that copy must go when the
	// message is settled or dropped.
	Spilled bool
	// Size is the body size. It is what Msg.Size() says, and is kept
	// while Msg is nil: a dead letter taken from a paged-out message
	// (Msg nil) still has its size.
	Size int
}
