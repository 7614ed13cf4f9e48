package broker

import (
	"fmt"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Queue arguments (x-message-ttl, x-max-length, x-dead-letter-exchange...)
// and the policies that may set the same things become a queue.Config for
// the queue's state machine plus the queueFeatures the broker acts on
// itself (dead-letter target, x-expires, consumer timeout).

// maxExpiry is rabbit_misc's MAX_EXPIRY_TIMER: the largest TTL or expiry
// accepted, in ms (ten years; RabbitMQ 3.10 accepts 315360000000 and
// refuses 315360000001).
const maxExpiry = 315360000000

// queueSettings is a queue's effective configuration: declare arguments
// merged with the policies that apply.
type queueSettings struct {
	cfg queue.Config
	// dlx is x-dead-letter-exchange (hasDLX tells it was given, since ""
	// names the default exchange); dlrk is x-dead-letter-routing-key.
	dlx, dlrk       string
	hasDLX, hasDLRK bool
	// hasDLStrategy tells x-dead-letter-strategy was given (a policy's
	// dead-letter-strategy does not override it); its value is
	// cfg.DeadLetterAtLeastOnce.
	hasDLStrategy bool
	// consumerTimeout is x-consumer-timeout in ms (0 = broker default).
	consumerTimeout int64
	// stream is set for a stream queue (stream_args.go).
	stream *streamSettings
	// quorum is set for a quorum queue (quorum.go).
	quorum bool
	// dedup is set for a deduplicating queue (queue_dedup.go): a template,
	// each queue entity gets its own copy.
	dedup *queueDedup
}

// queueFeatures is the broker's side of a queue's configuration and the
// timers that act on it. Guarded by queueEntity.mu.
type queueFeatures struct {
	set queueSettings
	// policy and opPolicy name the policies applied (snapshot, tests).
	policy, opPolicy string

	// dead holds dead letters taken out under the lock, to route to the
	// dead-letter exchange once it is released (deadletter.go).
	dead []queue.DeadLetter
	// expiry fires at expiryAt (unix ms) to expire messages (expiry.go).
	expiry   *time.Timer
	expiryAt int64
	// unused ticks the queue for x-expires (cfg.Expires; expiry.go).
	unused *time.Timer
	// now is the publish's clock while it dispatches (0 = read the clock),
	// so that a message with a TTL of 0 is delivered at the same now.
	now int64
}

// needsAt reports whether s needs the *At variants of the queue.
func (s *queueSettings) needsAt() bool {
	c := &s.cfg
	return c.MessageTTL >= 0 || c.MaxLength >= 0 || c.MaxLengthBytes >= 0 || c.DeliveryLimit >= 0 || s.hasDLX
}

// invalidArg is RabbitMQ's refusal of a bad declare argument.
func invalidArg(key, qname, vhost string, reason string) error {
	return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
		"invalid arg '%s' for queue '%s' in vhost '%s': %s", key, qname, vhost, reason)
}

// intArgValue reads an integer argument as rabbit_amqqueue's check_int_arg:
// only AMQP integer types are accepted. It returns the refusal reason,
// printed as RabbitMQ does (~p of a string: quoted).
func intArgValue(v any) (int64, string) {
	if n, ok := argInt(v); ok {
		return n, ""
	}
	return 0, fmt.Sprintf("\"expected integer, got %s\"", amqp.TypeName(v))
}

// classicUnsupportedArgs are arguments RabbitMQ knows but classic queues
// refuse whatever their value ("of queue type rabbit_classic_queue").
// x-delivery-limit is deliberately not among them: Warren supports it.
var classicUnsupportedArgs = []string{
	"x-max-in-memory-length", "x-max-in-memory-bytes", "x-quorum-initial-group-size",
	"x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size",
	"x-dead-letter-strategy",
}

// parseQueueArgs validates the declare arguments of queue name and returns
// the configuration they give. Unknown arguments are ignored (and kept by
// the caller). The checks and their texts are RabbitMQ's
// (rabbit_amqqueue:declare_args).
func parseQueueArgs(name, vhost string, args amqp.Table) (queueSettings, error) {
	s := queueSettings{cfg: queue.DefaultConfig()}
	bad := func(key, reason string) (queueSettings, error) {
		return queueSettings{}, invalidArg(key, name, vhost, reason)
	}
	// nonNeg is check_non_neg_int_arg; expiry is check_message_ttl_arg.
	nonNeg := func(key string) (int64, bool, string) {
		v, ok := args[key]
		if !ok {
			return 0, false, ""
		}
		n, why := intArgValue(v)
		if why != "" {
			return 0, true, why
		}
		if n < 0 {
			return 0, true, fmt.Sprintf("{value_negative,%d}", n)
		}
		return n, true, ""
	}
	expiry := func(key string, zeroOK bool) (int64, bool, string) {
		n, ok, why := nonNeg(key)
		switch {
		case why != "" || !ok:
			return n, ok, why
		case n == 0 && !zeroOK:
			return 0, true, "{value_zero,0}"
		case n > maxExpiry:
			return 0, true, fmt.Sprintf("{value_too_large,%d}", n)
		}
		return n, true, ""
	}
	// rabbit_channel reads x-dead-letter-exchange with rabbit_misc:r_arg
	// before declaring: a value that is not a string is refused first.
	if v, ok := args["x-dead-letter-exchange"]; ok {
		if _, isStr := v.(string); !isStr {
			return queueSettings{}, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
				"invalid type '%s' for arg 'x-dead-letter-exchange' in queue '%s' in vhost '%s'", amqp.TypeName(v), name, vhost)
		}
	}
	if t, ok := args["x-queue-type"]; ok {
		switch t {
		case "classic":
		case "stream":
			return parseStreamArgs(name, vhost, args)
		case "quorum":
			s.quorum = true
		default:
			if _, isStr := t.(string); !isStr {
				return bad("x-queue-type", fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(t)))
			}
			return bad("x-queue-type", fmt.Sprintf("\"unsupported queue type '%v'\"", t))
		}
	}
	unsupported, typeName := classicUnsupportedArgs, "rabbit_classic_queue"
	if s.quorum {
		unsupported, typeName = quorumUnsupportedArgs, "rabbit_quorum_queue"
	}
	for _, k := range unsupported {
		if _, ok := args[k]; ok {
			return queueSettings{}, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
				"invalid arg '%s' for queue '%s' in vhost '%s' of queue type %s", k, name, vhost, typeName)
		}
	}
	if n, ok, why := expiry("x-expires", false); why != "" {
		return bad("x-expires", why)
	} else if ok {
		s.cfg.Expires = n
	}
	if n, ok, why := expiry("x-message-ttl", true); why != "" {
		return bad("x-message-ttl", why)
	} else if ok {
		s.cfg.MessageTTL = n
	}
	if v, ok := args["x-dead-letter-exchange"]; ok {
		s.dlx, s.hasDLX = v.(string), true
	}
	if v, ok := args["x-dead-letter-routing-key"]; ok {
		k, isStr := v.(string)
		if !isStr {
			return bad("x-dead-letter-routing-key", fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v)))
		}
		if !s.hasDLX {
			return bad("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")
		}
		s.dlrk, s.hasDLRK = k, true
	}
	if v, ok := args["x-dead-letter-strategy"]; ok {
		alo, why := parseDLStrategy(v)
		if why != "" {
			return bad("x-dead-letter-strategy", why)
		}
		s.cfg.DeadLetterAtLeastOnce, s.hasDLStrategy = alo, true
	}
	if n, ok, why := nonNeg("x-max-length"); why != "" {
		return bad("x-max-length", why)
	} else if ok {
		s.cfg.MaxLength = n
	}
	if n, ok, why := nonNeg("x-max-length-bytes"); why != "" {
		return bad("x-max-length-bytes", why)
	} else if ok {
		s.cfg.MaxLengthBytes = n
	}
	if n, ok, why := nonNeg("x-max-priority"); why != "" {
		return bad("x-max-priority", why)
	} else if ok {
		if n > math.MaxUint8 {
			return bad("x-max-priority", fmt.Sprintf("{max_value_exceeded,%d}", n))
		}
		s.cfg.MaxPriority = uint8(n)
	}
	if v, ok := args["x-overflow"]; ok {
		o, why := parseOverflow(v)
		if why != "" {
			return bad("x-overflow", why)
		}
		s.cfg.Overflow = o
	}
	if v, ok := args["x-queue-mode"]; ok {
		switch m, isStr := v.(string); {
		case !isStr:
			return bad("x-queue-mode", fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v)))
		case m != "default" && m != "lazy":
			return bad("x-queue-mode", fmt.Sprintf("\"unsupported queue mode '%s'\"", m))
		}
	}
	if v, ok := args["x-single-active-consumer"]; ok {
		sac, isBool := v.(bool)
		if !isBool {
			return bad("x-single-active-consumer", fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v)))
		}
		s.cfg.SingleActiveConsumer = sac
	}
	if v, ok := args["x-quorum-initial-group-size"]; ok && s.quorum {
		if why := initialSizeArg(v); why != "" {
			return bad("x-quorum-initial-group-size", why)
		}
	}
	if n, ok, why := nonNeg("x-delivery-limit"); why != "" {
		return bad("x-delivery-limit", why)
	} else if ok {
		s.cfg.DeliveryLimit = n
	}
	if n, ok, why := nonNeg("x-consumer-timeout"); why != "" {
		return bad("x-consumer-timeout", why)
	} else if ok {
		s.consumerTimeout = n
	}
	if v, ok := args["x-message-group-header"]; ok {
		h, isStr := v.(string)
		if !isStr || h == "" {
			return bad("x-message-group-header", fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v)))
		}
		s.cfg.GroupHeader = h
	}
	d, err := parseQueueDedup(args, &s.cfg)
	if err != nil {
		return queueSettings{}, err
	}
	s.dedup = d
	s.cfg.DeadLetter = s.hasDLX
	return s, nil
}

// parseDLStrategy reads an x-dead-letter-strategy value (quorum queues;
// classic queues refuse the argument, as RabbitMQ does): at-least-once
// or at-most-once. why is the refusal reason, RabbitMQ's.
func parseDLStrategy(v any) (atLeastOnce bool, why string) {
	str, ok := v.(string)
	if !ok {
		return false, fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v))
	}
	switch str {
	case "at-least-once":
		return true, ""
	case "at-most-once":
		return false, ""
	}
	return false, "invalid_dlx_strategy"
}

// parseOverflow reads an x-overflow value; why is the refusal reason.
func parseOverflow(v any) (o queue.Overflow, why string) {
	str, ok := v.(string)
	if !ok {
		return 0, fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v))
	}
	switch str {
	case "drop-head":
		return queue.DropHead, ""
	case "reject-publish":
		return queue.RejectPublish, ""
	case "reject-publish-dlx":
		return queue.RejectPublishDLX, ""
	}
	return 0, "invalid_overflow"
}

// newQueueEntityState builds the state machine for settings s and
// initialises qe's features. Call before qe is shared.
func (qe *queueEntity) initFeatures(s queueSettings) {
	cfg := s.cfg
	// Dead-lettering at least once is for replicated quorum queues only
	// (quorumdlx.go), whose state is their group's, not qv.
	cfg.DeadLetterAtLeastOnce = false
	qe.qv = *queue.NewWithConfig(cfg)
	qe.q = &qe.qv
	// messages_persistent: a durable classic queue counts its persistent
	// messages (a quorum queue or a stream keeps every message on disk).
	qe.qv.SetCountPersistent(qe.durable && !s.quorum && s.stream == nil)
	qe.quorum = s.quorum
	qe.fx.set = s
	if s.dedup != nil {
		d := *s.dedup
		qe.dedup = &d
	}
	qe.at = s.needsAt()
	qe.touchLocked() // created (or recovered) now: x-expires counts from here
	if s.stream != nil {
		qe.stream = newStreamState(qe, s)
	}
}

// consumerPriority reads the x-priority argument of basic.consume
// (rabbit_amqqueue:check_consume_arguments): an integer, default 0.
func consumerPriority(args amqp.Table, qname, vhost string) (int, error) {
	v, ok := args["x-priority"]
	if !ok {
		return 0, nil
	}
	n, why := intArgValue(v)
	if why != "" {
		return 0, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 20,
			"invalid arg 'x-priority' for queue '%s' in vhost '%s': %s", qname, vhost, why)
	}
	return int(n), nil
}

// recoveredSettings is the configuration of a durable queue recovered with
// args (validated when it was declared), policies applied.
func (v *vhost) recoveredSettings(name string, args amqp.Table) queueSettings {
	s, err := parseQueueArgs(name, v.name, args)
	if err != nil {
		v.b.log.Warn("recovered queue has invalid arguments; ignoring them", zap.String("queue", name), zap.Error(err))
		s = queueSettings{cfg: queue.DefaultConfig()}
	}
	return v.withPolicies(name, args, s)
}

// The queue locators RabbitMQ knows: x-queue-leader-locator's (quorum
// queues and streams, and classic queues since 3.12) and the classic
// queues' older x-queue-master-locator's.
var (
	leaderLocators = []string{"client-local", "balanced", "random", "least-leaders"}
	masterLocators = []string{"client-local", "min-masters", "random"}
)

// checkLocatorArgs refuses, as RabbitMQ does, a queue locator argument of
// a queue about to be declared that names no locator it knows. It is
// checked before the declaration is proposed, not in parseQueueArgs: a
// queue declared before Warren checked them (in a data dir, or in a
// definitions log a node replays) keeps its other arguments.
func checkLocatorArgs(name, vhost string, args amqp.Table) error {
	for _, a := range []struct {
		key   string
		known []string
	}{{"x-queue-leader-locator", leaderLocators}, {"x-queue-master-locator", masterLocators}} {
		v, ok := args[a.key]
		if !ok || a.key == "x-queue-master-locator" && args["x-queue-type"] != nil && args["x-queue-type"] != "classic" {
			continue // quorum queues and streams refuse it in parseQueueArgs
		}
		if why := locatorArg(v, a.known); why != "" {
			return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
				"invalid arg '%s' for queue '%s' in vhost '%s': %s", a.key, name, vhost, why)
		}
	}
	return nil
}

// locatorArg checks a queue locator argument as RabbitMQ does: a string
// among known. It returns the reason of a 406 ("" when the value is
// good).
func locatorArg(v any, known []string) string {
	s, ok := v.(string)
	if !ok {
		return fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v))
	}
	if slices.Contains(known, s) {
		return ""
	}
	return "invalid_queue_locator_arg"
}
