package queue

// Gate is a limit that lives outside the queue and is shared by several
// consumers: a channel-wide prefetch, channel.flow, or the outbound buffer
// of the consumer's connection. The queue asks it once per delivery it is
// about to make; Acquire reserves room for one delivery or reports that
// there is none, in which case the owner of the gate must call the queue's
// Dispatch again once room appears.
type Gate interface {
	Acquire() bool
}

// Consumer is one basic.consume on a queue.
type Consumer struct {
	// Tag is the consumer tag, unique on its channel.
	Tag string
	// NoAck consumers settle on delivery; prefetch does not apply to them.
	NoAck bool
	// Exclusive consumers are the only consumer of their queue.
	Exclusive bool
	// Prefetch is the per-consumer prefetch count (0 = unlimited).
	Prefetch int
	// Gate, when set, is asked before every delivery.
	Gate Gate
	// Owner is the caller's handle for the consumer (its channel).
	Owner any

	unacked int
}

// Unacked is how many deliveries to this consumer await settlement.
func (c *Consumer) Unacked() int { return c.unacked }

func (c *Consumer) hasCredit() bool {
	if c.NoAck {
		return true
	}
	return c.Prefetch == 0 || c.unacked < c.Prefetch
}
