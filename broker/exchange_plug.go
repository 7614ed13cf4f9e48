package broker

import (
	"fmt"
	"strconv"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/queue"
)

// Exchange features that RabbitMQ users get from plugins, built in
// (docs/plugins-builtin.md): the delayed-message exchange (delayed.go),
// the consistent-hash and modulus-hash exchanges (exchange package, with
// hash-header and hash-property here) and exchange-level deduplication.
// An exchange with none of them has a nil plug: the hot path tests one
// pointer.

// Exchange types and arguments of the features.
const (
	typeDelayed       = "x-delayed-message"
	argDelayedType    = "x-delayed-type"
	argDelayedEx      = "x-delayed-exchange"
	argHashHeader     = "hash-header"
	argHashProperty   = "hash-property"
	headerDelay       = "x-delay"
	typeDedup         = "x-message-deduplication"
	argDedup          = "x-message-deduplication"
	hashPropMessageID = "message_id"
	hashPropCorrID    = "correlation_id"
	hashPropTimestamp = "timestamp"
)

// exchangePlug is an exchange's plugin-like features. It is set when the
// exchange is made and not changed after (the delayed counter aside).
type exchangePlug struct {
	// typ is the declared type when it is not the routing kind's name
	// (x-delayed-message).
	typ string
	// hashHeader / hashProperty: what a consistent-hash exchange hashes
	// instead of the routing key.
	hashHeader, hashProperty string
	// delay is set on a delayed exchange (delayed.go).
	delay *delayedExchange
	// dedup is set on a deduplicating exchange (dedup.go).
	dedup *dedupCache
	// id names the exchange in the store's keys of delayed messages and
	// cache entries: its definition id, or one with the top bit set for a
	// transient exchange (set before the exchange is visible; delayed.go).
	id uint64
}

// exchangeType is what an exchange.declare's type and arguments make.
type exchangeType struct {
	kind exchange.Kind
	plug *exchangePlug
}

// parseExchangeType resolves an exchange.declare's type and checks the
// arguments of its features, with the errors the plugins give.
func parseExchangeType(typ string, args amqp.Table, cls, mth uint16) (exchangeType, error) {
	var t exchangeType
	var p exchangePlug
	switch typ {
	case typeDelayed:
		dt, _ := args[argDelayedType].(string)
		switch dt {
		case typeDelayed:
			return t, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "Invalid argument, 'x-delayed-type' can't be 'x-delayed-message'")
		case "":
			return t, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "Invalid argument, 'x-delayed-type' must be an existing exchange type")
		}
		k, ok := exchange.ParseType(dt)
		if !ok {
			return t, amqp.Errorf(amqp.CommandInvalid, cls, mth, "unknown exchange type '%s'", dt)
		}
		t.kind = k
		p.typ = typ
		p.delay = &delayedExchange{}
	case typeDedup:
		// The deduplication plugin's exchange type routes as fanout.
		t.kind = exchange.Fanout
		p.typ = typ
	default:
		k, ok := exchange.ParseType(typ)
		if !ok {
			return t, amqp.Errorf(amqp.CommandInvalid, cls, mth, "unknown exchange type '%s'", typ)
		}
		t.kind = k
	}
	if on, _ := args[argDelayedEx].(bool); on && p.delay == nil {
		p.delay = &delayedExchange{}
	}
	if t.kind == exchange.ConsistentHash {
		h, hasH := args[argHashHeader]
		pr, hasP := args[argHashProperty]
		if hasH && hasP {
			return t, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "hash-header and hash-property are mutually exclusive")
		}
		if hasH {
			s, ok := h.(string)
			if !ok || s == "" {
				return t, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "hash-header must be a non-empty string")
			}
			p.hashHeader = s
		}
		if hasP {
			s, _ := pr.(string)
			switch s {
			case hashPropMessageID, hashPropCorrID, hashPropTimestamp:
				p.hashProperty = s
			default:
				return t, amqp.Errorf(amqp.PreconditionFailed, cls, mth,
					"hash-property must be one of message_id, correlation_id, timestamp; got '%v'", pr)
			}
		}
	}
	dd, err := parseDedupArgs(typ == typeDedup, args, cls, mth)
	if err != nil {
		return t, err
	}
	p.dedup = dd
	if p != (exchangePlug{}) {
		t.plug = &p
	}
	return t, nil
}

// typeName is the exchange's type as declared and reported.
func (e *exchangeEntity) typeName() string {
	if e.plug != nil && e.plug.typ != "" {
		return e.plug.typ
	}
	return e.kind.String()
}

// hashOn reports whether e hashes something else than the routing key.
func (p *exchangePlug) hashOn() bool {
	return p != nil && (p.hashHeader != "" || p.hashProperty != "")
}

// hashValue is what a consistent-hash exchange with hash-header or
// hash-property hashes: the header's or property's value as text, or ""
// when the message has none (all such messages go to one destination, as
// the plugin sends them all to the bucket of its 'undefined').
func (p *exchangePlug) hashValue(headers func() amqp.Table, header []byte) string {
	if p.hashHeader != "" {
		v, ok := headers()[p.hashHeader]
		if !ok {
			return ""
		}
		switch x := v.(type) {
		case string:
			return x
		case []byte:
			return string(x)
		}
		return fmt.Sprint(v)
	}
	var h amqp.ContentHeader
	if header == nil || amqp.DecodeContentHeader(header, &h) != nil {
		return ""
	}
	switch p.hashProperty {
	case hashPropMessageID:
		return h.Properties.MessageID
	case hashPropCorrID:
		return h.Properties.CorrelationID
	default:
		if h.Properties.Timestamp == 0 {
			return ""
		}
		return strconv.FormatUint(h.Properties.Timestamp, 10)
	}
}

// plugPublish applies ex's deduplication and delay to a publish before
// routing: a duplicate is dropped (returned when mandatory), a delayed
// message stored for later. handled reports that the publish needs no
// routing now; routed whether it counts as taken.
func (ch *channel) plugPublish(ex *exchangeEntity, mandatory bool, msg *queue.Message, confirmSeq uint64) (handled, routed bool) {
	p := ex.plug
	if p.dedup != nil && ch.isDuplicate(ex, msg) {
		ch.returnUnroutable(mandatory, msg)
		return true, false
	}
	if p.delay != nil && ch.delayPublish(ex, msg, confirmSeq) {
		return true, true
	}
	return false, false
}
