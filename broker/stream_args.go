package broker

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// maxSegmentSize is RabbitMQ's largest x-stream-max-segment-size-bytes.
const maxSegmentSize = 3_000_000_000

// streamSettings is a stream queue's declared configuration (arguments), to
// which policies are applied (streamPolicies).
type streamSettings struct {
	maxBytes   int64 // x-max-length-bytes (0 = unlimited)
	maxAge     int64 // x-max-age in ms (0 = unlimited)
	segment    int64 // x-stream-max-segment-size-bytes (0 = default)
	hasMaxAge  bool
	hasSegment bool
	// single is x-single-active-consumer: named consumers of one name form
	// a group with one active member (a Warren extension; RabbitMQ refuses
	// the argument on streams over AMQP 0-9-1).
	single bool
}

// streamUnsupportedArgs are arguments RabbitMQ knows but stream queues
// refuse whatever their value ("of queue type rabbit_stream_queue").
var streamUnsupportedArgs = []string{
	"x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
	"x-max-length", "x-max-priority", "x-overflow", "x-queue-mode", "x-queue-version",
	"x-delivery-limit", "x-max-in-memory-length", "x-max-in-memory-bytes",
	"x-quorum-initial-group-size", "x-queue-master-locator", "x-consumer-timeout",
}

// parseStreamArgs validates the declare arguments of stream queue name, as
// rabbit_stream_queue does.
func parseStreamArgs(name, vhost string, args amqp.Table) (queueSettings, error) {
	s := queueSettings{cfg: queue.DefaultConfig(), stream: &streamSettings{}}
	for _, k := range streamUnsupportedArgs {
		if _, ok := args[k]; ok {
			return queueSettings{}, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
				"invalid arg '%s' for queue '%s' in vhost '%s' of queue type rabbit_stream_queue", k, name, vhost)
		}
	}
	if v, ok := args["x-max-length-bytes"]; ok {
		n, why := intArgValue(v)
		if why == "" && n < 0 {
			why = fmt.Sprintf("{value_negative,%d}", n)
		}
		if why != "" {
			return queueSettings{}, invalidArg("x-max-length-bytes", name, vhost, why)
		}
		s.stream.maxBytes = n
		s.cfg.MaxLengthBytes = n
	}
	if v, ok := args["x-initial-cluster-size"]; ok {
		if why := initialSizeArg(v); why != "" {
			return queueSettings{}, invalidArg("x-initial-cluster-size", name, vhost, why)
		}
	}
	if v, ok := args["x-max-age"]; ok {
		str, isStr := v.(string)
		if !isStr {
			return queueSettings{}, invalidArg("x-max-age", name, vhost, fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v)))
		}
		d, ok := parseMaxAge(str)
		if !ok {
			return queueSettings{}, invalidArg("x-max-age", name, vhost, "invalid_max_age")
		}
		s.stream.maxAge, s.stream.hasMaxAge = d.Milliseconds(), true
	}
	if v, ok := args["x-stream-max-segment-size-bytes"]; ok {
		n, why := intArgValue(v)
		if why == "" && n < 0 {
			why = fmt.Sprintf("{value_negative,%d}", n)
		}
		if why != "" {
			return queueSettings{}, invalidArg("x-stream-max-segment-size-bytes", name, vhost, why)
		}
		if n > maxSegmentSize {
			return queueSettings{}, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
				"Exceeded max value for x-stream-max-segment-size-bytes")
		}
		s.stream.segment, s.stream.hasSegment = n, true
	}
	if v, ok := args["x-single-active-consumer"]; ok {
		sac, isBool := v.(bool)
		if !isBool {
			return queueSettings{}, invalidArg("x-single-active-consumer", name, vhost, fmt.Sprintf("{unacceptable_type,%s}", amqp.TypeName(v)))
		}
		s.stream.single = sac
	}
	return s, nil
}

// checkStreamDeclare is rabbit_queue_type_util's check_auto_delete,
// check_exclusive and check_non_durable: streams are durable, shared and
// kept.
func checkStreamDeclare(name, vhost string, durable bool, m *amqp.QueueDeclare) error {
	prop := ""
	switch {
	case m.AutoDelete:
		prop = "auto-delete"
	case m.Exclusive:
		prop = "exclusive-owner"
	case !durable:
		prop = "non-durable"
	default:
		return nil
	}
	return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
		"invalid property '%s' for queue '%s' in vhost '%s'", prop, name, vhost)
}

// parseMaxAge reads RabbitMQ's age syntax: a positive integer and a unit,
// Y (365 days), M (30 days), D, h, m or s.
func parseMaxAge(s string) (time.Duration, bool) {
	if len(s) < 2 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 32)
	if err != nil {
		return 0, false
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'Y':
		unit = 365 * 24 * time.Hour
	case 'M':
		unit = 30 * 24 * time.Hour
	case 'D':
		unit = 24 * time.Hour
	case 'h':
		unit = time.Hour
	case 'm':
		unit = time.Minute
	case 's':
		unit = time.Second
	default:
		return 0, false
	}
	if n > uint64(math.MaxInt64/unit) {
		return 0, false // beyond what a duration holds (~292 years)
	}
	return time.Duration(n) * unit, true
}

// streamConfig is the state machine's configuration for settings s.
func streamConfig(s queueSettings) queue.StreamConfig {
	cfg := queue.StreamConfig{CacheBytes: streamCacheBytes}
	if s.stream != nil {
		cfg.MaxAge = s.stream.maxAge
		cfg.MaxSegmentBytes = s.stream.segment
	}
	if s.cfg.MaxLengthBytes > 0 {
		cfg.MaxBytes = s.cfg.MaxLengthBytes
	}
	return cfg
}

// streamPolicies applies the policy keys of streams to s: max-age and
// stream-max-segment-size-bytes when the argument is not given
// (max-length-bytes is merged with the other numeric keys, the lower
// winning).
func streamPolicies(pols []*policy, s queueSettings) queueSettings {
	st := *s.stream
	for _, p := range pols {
		if p == nil {
			continue
		}
		if v, ok := p.def["max-age"].(string); ok && !st.hasMaxAge {
			if d, ok := parseMaxAge(v); ok {
				st.maxAge, st.hasMaxAge = d.Milliseconds(), true
			}
		}
		if n, ok := policyInt(p.def["stream-max-segment-size-bytes"]); ok && !st.hasSegment {
			st.segment, st.hasSegment = n, true
		}
	}
	s.stream = &st
	return s
}

// maxStreamConsumerName is the longest x-stream-consumer-name taken, in
// bytes; the store keeps the offsets of names of any length.
const maxStreamConsumerName = 255

// streamConsumeArgs are a stream consumer's arguments.
type streamConsumeArgs struct {
	offset          queue.OffsetSpec
	offsetGiven     bool
	filters         []string
	matchUnfiltered bool
	name            string
	single          bool
}

// parseStreamConsumeArgs reads x-stream-offset ("first", "last", "next", an
// offset, a timestamp or an interval such as "1h" or "7D"), x-stream-filter
// (a string or an array of strings), x-stream-match-unfiltered,
// x-stream-consumer-name and x-single-active-consumer.
func parseStreamConsumeArgs(args amqp.Table, qname, vhost string, now time.Time) (streamConsumeArgs, error) {
	var a streamConsumeArgs
	bad := func(key string, v any) (streamConsumeArgs, error) {
		return streamConsumeArgs{}, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 20,
			"invalid arg '%s' for queue '%s' in vhost '%s': %v", key, qname, vhost, v)
	}
	if v, ok := args["x-stream-offset"]; ok {
		a.offsetGiven = true
		switch x := v.(type) {
		case string:
			switch x {
			case "first":
				a.offset.Kind = queue.OffsetFirst
			case "last":
				a.offset.Kind = queue.OffsetLast
			case "next":
				a.offset.Kind = queue.OffsetNext
			default:
				d, ok := parseMaxAge(x)
				if !ok {
					return bad("x-stream-offset", x)
				}
				a.offset = queue.OffsetSpec{Kind: queue.OffsetTimestamp, Time: now.Add(-d).UnixMilli()}
			}
		case time.Time:
			a.offset = queue.OffsetSpec{Kind: queue.OffsetTimestamp, Time: x.UnixMilli()}
		default:
			n, isInt := argInt(v)
			if !isInt {
				return bad("x-stream-offset", amqp.TypeName(v))
			}
			a.offset = queue.OffsetSpec{Kind: queue.OffsetAbsolute, Offset: uint64(max(n, 0))}
		}
	}
	if v, ok := args["x-stream-filter"]; ok {
		switch x := v.(type) {
		case string:
			a.filters = []string{x}
		case []any:
			for _, e := range x {
				s, isStr := e.(string)
				if !isStr {
					return bad("x-stream-filter", amqp.TypeName(e))
				}
				a.filters = append(a.filters, s)
			}
		default:
			return bad("x-stream-filter", amqp.TypeName(v))
		}
	}
	if v, ok := args["x-stream-match-unfiltered"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return bad("x-stream-match-unfiltered", amqp.TypeName(v))
		}
		a.matchUnfiltered = b
	}
	if v, ok := args["x-stream-consumer-name"]; ok {
		// At most 255 bytes, as RabbitMQ's stream tracking references
		// (and AMQP's short strings, consumer tags among them).
		s, isStr := v.(string)
		if !isStr || s == "" {
			return bad("x-stream-consumer-name", v)
		}
		if len(s) > maxStreamConsumerName {
			return bad("x-stream-consumer-name", fmt.Sprintf("name of %d bytes, at most %d", len(s), maxStreamConsumerName))
		}
		a.name = s
	}
	if v, ok := args["x-single-active-consumer"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return bad("x-single-active-consumer", amqp.TypeName(v))
		}
		a.single = b
	}
	return a, nil
}

// checkStreamDeclare refuses a stream declare without a store or with
// properties streams cannot have.
func (b *Broker) checkStreamDeclare(name, vhost string, durable bool, m *amqp.QueueDeclare) error {
	if err := checkStreamDeclare(name, vhost, durable, m); err != nil {
		return err
	}
	if b.cfg.Store == nil {
		kind := "stream"
		if m.Arguments["x-queue-type"] == "quorum" {
			kind = "quorum"
		}
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
			"%s queue '%s' in vhost '%s' needs a data directory", kind, name, vhost)
	}
	return nil
}

// nodeLocalStream reports whether declare arguments ask for a stream of
// one replica (x-initial-cluster-size 1). In a cluster with data groups
// such a stream is not replicated: it lives on the node placeQueue
// chooses (the declaring one, or spread with x-queue-leader-locator
// balanced), as a stream does on a single node. Any other size is
// replicated in a data group: its members (three, or the cluster's nodes
// when fewer) are its replicas, a size of 2 included, since a group of
// two survives no loss. RabbitMQ's default is the cluster's size, capped
// here by the group's.
func nodeLocalStream(args amqp.Table) bool {
	n, ok := argInt(args["x-initial-cluster-size"])
	return ok && n == 1
}

// nodeLocalQuorum is nodeLocalStream for a quorum queue: one declared with
// x-quorum-initial-group-size 1 is a quorum queue of one replica, on the
// node placeQueue chooses, as a quorum queue declared before the cluster
// planned its data groups; any other size gets its group's members.
func nodeLocalQuorum(args amqp.Table) bool {
	n, ok := argInt(args["x-quorum-initial-group-size"])
	return ok && n == 1
}

// initialSizeArg is rabbit_amqqueue:check_initial_cluster_size_arg (for
// x-initial-cluster-size and x-quorum-initial-group-size): a positive
// integer. It returns the refusal's reason, or "".
func initialSizeArg(v any) string {
	n, why := intArgValue(v)
	switch {
	case why != "":
	case n < 0:
		why = fmt.Sprintf("{value_negative,%d}", n)
	case n == 0:
		why = "{value_zero,0}"
	}
	return why
}
