package queue

// Overflow is what a queue does when a publish would exceed its length
// limits (RabbitMQ's x-overflow).
type Overflow uint8

const (
	// DropHead drops (dead-letters) the oldest ready messages to make room.
	DropHead Overflow = iota
	// RejectPublish refuses the new message (basic.nack to a confirming
	// publisher).
	RejectPublish
	// RejectPublishDLX refuses the new message and dead-letters it.
	RejectPublishDLX
)

// String returns the x-overflow argument value.
func (o Overflow) String() string {
	switch o {
	case RejectPublish:
		return "reject-publish"
	case RejectPublishDLX:
		return "reject-publish-dlx"
	default:
		return "drop-head"
	}
}

// Config is a queue's behaviour, from its declare arguments and policies.
// Integer limits use -1 for "none".
type Config struct {
	// MessageTTL is x-message-ttl in milliseconds.
	MessageTTL int64
	// MaxLength is x-max-length: the most ready messages.
	MaxLength int64
	// MaxLengthBytes is x-max-length-bytes: the most body bytes of ready
	// messages.
	MaxLengthBytes int64
	// Overflow is x-overflow.
	Overflow Overflow
	// MaxPriority is x-max-priority (1..255); 0 is not a priority queue.
	// It is fixed when the queue is made.
	MaxPriority uint8
	// SingleActiveConsumer is x-single-active-consumer. It is fixed when
	// the queue is made.
	SingleActiveConsumer bool
	// DeadLetter tells whether a dead-letter exchange is configured. The
	// queue reports every message it removes as a DeadLetter either way
	// (the owner may have a durable record to delete); without one a
	// publish refused by RejectPublishDLX is not reported, since it was
	// never stored.
	DeadLetter bool
	// DeliveryLimit is x-delivery-limit: a message returned by ReturnAt
	// after more deliveries than this is dead-lettered instead of requeued.
	DeliveryLimit int64
	// Expires is x-expires in ms (0 = never): OpTick reports EffExpired
	// once the queue has had no consumer and no use for that long.
	Expires int64
	// GroupHeader is x-message-group-header: the header whose value puts
	// a message in a message group (groups.go); "" for none. It is fixed
	// when the queue is made; priorities do not apply with it.
	GroupHeader string
	// DedupSize is x-cache-size of a queue with x-message-deduplication
	// (0: no deduplication), DedupTTL its x-cache-ttl in ms (0: none):
	// the queue keeps a deduplication cache in its state (msgdedup.go).
	// Both are fixed when the queue is made.
	DedupSize int
	DedupTTL  int64
	// DeadLetterAtLeastOnce is x-dead-letter-strategy at-least-once: with
	// DeadLetter and Overflow RejectPublish (AtLeastOnce) the queue keeps
	// its dead letters until the owner settles them (discards.go).
	DeadLetterAtLeastOnce bool
}

// DefaultConfig is the configuration of New: no limits of any kind.
func DefaultConfig() Config {
	return Config{MessageTTL: -1, MaxLength: -1, MaxLengthBytes: -1, DeliveryLimit: -1}
}

// plain reports whether publishes need neither TTL nor length checks.
func (c *Config) plain() bool {
	return c.MessageTTL < 0 && c.MaxLength < 0 && c.MaxLengthBytes < 0
}

// NewWithConfig returns an empty queue configured by cfg.
func NewWithConfig(cfg Config) *Queue {
	if cfg.GroupHeader != "" {
		cfg.MaxPriority = 0
	}
	q := &Queue{cfg: cfg}
	if cfg.GroupHeader != "" {
		q.mg = newGroupState(cfg.GroupHeader)
	}
	if cfg.MaxPriority > 0 {
		q.hi = make([]lane, cfg.MaxPriority)
	}
	if cfg.DedupSize > 0 {
		q.dedup = &Dedup{Size: cfg.DedupSize, TTL: cfg.DedupTTL}
	}
	return q
}

// Config returns the queue's configuration.
func (q *Queue) Config() Config { return q.cfg }

// SetConfig applies a changed configuration (a policy was set or cleared)
// at time now (unix ms). MaxPriority and SingleActiveConsumer keep the
// values the queue was made with, as in RabbitMQ where they are declare
// arguments only. A new TTL applies to messages published from now on;
// messages already expired at now are removed at once (reason "expired"),
// and with DropHead a lowered length limit drops the oldest ready messages
// at once (reason "maxlen"). Lowered limits under RejectPublish only refuse
// later publishes.
func (q *Queue) SetConfig(cfg Config, now int64) []DeadLetter {
	cfg.MaxPriority = q.cfg.MaxPriority
	cfg.SingleActiveConsumer = q.cfg.SingleActiveConsumer
	cfg.GroupHeader = q.cfg.GroupHeader
	cfg.DedupSize, cfg.DedupTTL = q.cfg.DedupSize, q.cfg.DedupTTL
	q.cfg = cfg
	var dls []DeadLetter
	if now != 0 {
		q.expire(now, &dls)
	}
	q.dropHead(false, &dls)
	return dls
}
