package broker

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
	"github.com/warrenmq/warren/queue"
)

func notFoundExchange(name, vhost string, classID, methodID uint16) error {
	return amqp.Errorf(amqp.NotFound, classID, methodID, "no exchange '%s' in vhost '%s'", name, vhost)
}

func accessRefusedDefault(classID, methodID uint16) error {
	return amqp.Errorf(amqp.AccessRefused, classID, methodID, "operation not permitted on the default exchange")
}

func inequivalent(what, arg, name, vhost string, got, current any, classID, methodID uint16) error {
	return amqp.Errorf(amqp.PreconditionFailed, classID, methodID,
		"inequivalent arg '%s' for %s '%s' in vhost '%s': received '%v' but current is '%v'",
		arg, what, name, vhost, got, current)
}

func (ch *channel) exchangeDeclare(m *amqp.ExchangeDeclare) error {
	const cls, mth = amqp.ClassExchange, 10
	v := ch.c.vhost
	if m.Passive {
		if m.Exchange == "" {
			return accessRefusedDefault(cls, mth)
		}
		ex := v.exchange(m.Exchange)
		if ex == nil && ch.c.b.syncDefinitions() {
			ex = v.exchange(m.Exchange)
		}
		if ex == nil {
			return notFoundExchange(m.Exchange, v.name, cls, mth)
		}
		if !m.NoWait {
			ch.c.send(ch.id, &amqp.ExchangeDeclareOk{})
		}
		return nil
	}
	// RabbitMQ's order (rabbit_channel): the type, the default exchange,
	// then the reserved prefix, which only stops creation (an existing
	// amq.* exchange may be redeclared), then equivalence.
	if _, err := parseExchangeType(m.Type, m.Arguments, cls, mth); err != nil {
		return err
	}
	if m.Exchange == "" {
		return accessRefusedDefault(cls, mth)
	}
	// rabbit_channel reads alternate-exchange with rabbit_misc:r_arg: a
	// value that is not a string is refused.
	if ae, ok := m.Arguments["alternate-exchange"]; ok {
		if _, isStr := ae.(string); !isStr {
			return amqp.Errorf(amqp.PreconditionFailed, cls, mth,
				"invalid type '%s' for arg 'alternate-exchange' in exchange '%s' in vhost '%s'", amqp.TypeName(ae), m.Exchange, v.name)
		}
	}
	if err := ch.accessExchangeDeclare(m); err != nil {
		return err
	}
	args, err := encodeArgs(m.Arguments)
	if err != nil {
		return storeError("exchange", err, cls, mth)
	}
	r := ch.c.b.propose(&defCmd{Op: opDeclareExchange, VHost: v.name, VHostID: v.storeID, Name: m.Exchange,
		Type: m.Type, Durable: m.Durable, AutoDelete: m.AutoDelete, Internal: m.Internal, Args: args})
	if r.err != nil {
		return r.err
	}
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.ExchangeDeclareOk{})
	}
	return nil
}

// exchangeEquivalenceArgs are the arguments RabbitMQ compares when an
// exchange is redeclared (rabbit_exchange:assert_args_equivalence); others
// may differ.
var exchangeEquivalenceArgs = []string{"alternate-exchange"}

func equivalentExchange(ex *exchangeEntity, m *amqp.ExchangeDeclare, vhost string) error {
	const cls, mth = amqp.ClassExchange, 10
	switch {
	case ex.typeName() != m.Type:
		return inequivalent("exchange", "type", ex.name, vhost, m.Type, ex.typeName(), cls, mth)
	case ex.durable != m.Durable:
		return inequivalent("exchange", "durable", ex.name, vhost, m.Durable, ex.durable, cls, mth)
	case ex.autoDelete != m.AutoDelete:
		return inequivalent("exchange", "auto_delete", ex.name, vhost, m.AutoDelete, ex.autoDelete, cls, mth)
	case ex.internal != m.Internal:
		return inequivalent("exchange", "internal", ex.name, vhost, m.Internal, ex.internal, cls, mth)
	}
	return equivalentArgs("exchange", ex.name, vhost, ex.args, m.Arguments, exchangeEquivalenceArgs, cls, mth)
}

// equivalentArgs is rabbit_misc:assert_args_equivalence: for each of keys,
// the current and requested arguments must both be absent, or have values
// of the same type class (all integer types are one class) that are
// equal. The error text describes values as RabbitMQ does: with both
// present, the bare values ("received '6' but current is '5'", whatever
// their types); with one absent, "the value '5' of type 'long'" and "none".
func equivalentArgs(what, name, vhost string, current, requested amqp.Table, keys []string, cls, mth uint16) error {
	for _, k := range keys {
		cur, curOK := current[k]
		req, reqOK := requested[k]
		switch {
		case !curOK && !reqOK:
			continue
		case curOK && reqOK && sameArg(cur, req):
			continue
		}
		// Classic queues: x-queue-type "classic" is the same as none.
		if k == "x-queue-type" && ((!curOK && req == "classic") || (!reqOK && cur == "classic")) {
			continue
		}
		if curOK && reqOK {
			return amqp.Errorf(amqp.PreconditionFailed, cls, mth,
				"inequivalent arg '%s' for %s '%s' in vhost '%s': received '%s' but current is '%s'",
				k, what, name, vhost, argText(req), argText(cur))
		}
		return amqp.Errorf(amqp.PreconditionFailed, cls, mth,
			"inequivalent arg '%s' for %s '%s' in vhost '%s': received %s but current is %s",
			k, what, name, vhost, describeArg(req, reqOK), describeArg(cur, curOK))
	}
	return nil
}

// sameArg compares two argument values as RabbitMQ does: same type class
// and equal (Erlang ==) values.
func sameArg(a, b any) bool {
	if x, ok := argInt(a); ok {
		y, ok := argInt(b)
		return ok && x == y
	}
	if x, ok := argFloat(a); ok {
		y, ok := argFloat(b)
		return ok && x == y
	}
	if amqp.TypeName(a) != amqp.TypeName(b) {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// argInt is an integer argument of any width as an int64 (queue.IntArg).
func argInt(v any) (int64, bool) { return queue.IntArg(v) }

func argFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// describeArg formats an argument as rabbit_misc:val/1.
func describeArg(v any, present bool) string {
	if !present {
		return "none"
	}
	return fmt.Sprintf("the value '%s' of type '%s'", argText(v), amqp.TypeName(v))
}

// argText is an argument's value as RabbitMQ prints it.
func argText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case time.Time:
		return strconv.FormatInt(x.Unix(), 10)
	}
	return fmt.Sprint(v)
}

// checkName enforces the 255-byte limit on names (shortstr already does,
// but names arriving by other paths must too).
func checkName(name string, cls, mth uint16) error {
	if len(name) > 255 {
		return amqp.Errorf(amqp.PreconditionFailed, cls, mth, "name too long")
	}
	return nil
}

func (ch *channel) exchangeDelete(m *amqp.ExchangeDelete) error {
	const cls, mth = amqp.ClassExchange, 20
	v := ch.c.vhost
	if m.Exchange == "" {
		return accessRefusedDefault(cls, mth)
	}
	if strings.HasPrefix(m.Exchange, "amq.") {
		return amqp.Errorf(amqp.AccessRefused, cls, mth,
			"deletion of system exchange '%s' in vhost '%s' not allowed", m.Exchange, v.name)
	}
	if err := ch.accessExchangeDelete(m.Exchange); err != nil {
		return err
	}
	r := ch.c.b.propose(&defCmd{Op: opDeleteExchange, VHost: v.name, VHostID: v.storeID, Name: m.Exchange, IfUnused: m.IfUnused})
	if r.err != nil {
		return r.err
	}
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.ExchangeDeleteOk{})
	}
	return nil
}

// exchangeBind handles exchange.bind (bind true) and exchange.unbind.
func (ch *channel) exchangeBind(dest, src, key string, args amqp.Table, noWait, bind bool) error {
	cls, mth := uint16(amqp.ClassExchange), uint16(30)
	if !bind {
		mth = 40
	}
	v := ch.c.vhost
	if err := ch.accessExchangeBind(dest, src, key, cls, mth); err != nil {
		return err
	}
	if dest == "" || src == "" {
		return accessRefusedDefault(cls, mth)
	}
	if err := ch.c.b.changeBinding(v, src, dest, true, key, args, bind, ch.c.id, cls, mth); err != nil {
		return err
	}
	if !noWait {
		if bind {
			ch.c.send(ch.id, &amqp.ExchangeBindOk{})
		} else {
			ch.c.send(ch.id, &amqp.ExchangeUnbindOk{})
		}
	}
	return nil
}

func validateBindArgs(s *exchangeEntity, key string, args amqp.Table, bind bool, cls, mth uint16) error {
	if s.kind == exchange.ConsistentHash && bind {
		// The consistent-hash plugin's validate_binding: the key is a weight.
		if exchange.ValidateHashWeight(key) != nil {
			return amqp.Errorf(amqp.PreconditionFailed, cls, mth,
				"The binding key of a consistent-hash exchange must be an integer weight from 1 to %d: '%s'", exchange.MaxHashWeight, key)
		}
		return nil
	}
	if s.kind != exchange.Headers {
		return nil
	}
	if err := exchange.ValidateHeadersArgs(args); err != nil {
		return amqp.Errorf(amqp.PreconditionFailed, cls, mth, "%v", err)
	}
	return nil
}
