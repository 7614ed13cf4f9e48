package broker

import (
	"reflect"
	"strings"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
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
	if m.Exchange == "" {
		return accessRefusedDefault(cls, mth)
	}
	if m.Passive {
		v.mu.RLock()
		ex := v.exchanges[m.Exchange]
		v.mu.RUnlock()
		if ex == nil {
			return notFoundExchange(m.Exchange, v.name, cls, mth)
		}
		if !m.NoWait {
			ch.c.send(ch.id, &amqp.ExchangeDeclareOk{})
		}
		return nil
	}
	if strings.HasPrefix(m.Exchange, "amq.") {
		return amqp.Errorf(amqp.AccessRefused, cls, mth,
			"exchange name '%s' contains reserved prefix 'amq.*'", m.Exchange)
	}
	if err := checkName(m.Exchange, cls, mth); err != nil {
		return err
	}
	kind, ok := exchange.ParseKind(m.Type)
	if !ok {
		return amqp.Errorf(amqp.CommandInvalid, cls, mth, "unknown exchange type '%s'", m.Type)
	}
	v.mu.Lock()
	ex := v.exchanges[m.Exchange]
	if ex != nil {
		err := equivalentExchange(ex, m, v.name)
		v.mu.Unlock()
		if err != nil {
			return err
		}
	} else {
		v.exchanges[m.Exchange] = &exchangeEntity{
			name:       m.Exchange,
			kind:       kind,
			durable:    m.Durable,
			autoDelete: m.AutoDelete,
			internal:   m.Internal,
			args:       m.Arguments,
			router:     exchange.NewRouter(kind),
		}
		v.mu.Unlock()
	}
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.ExchangeDeclareOk{})
	}
	return nil
}

func equivalentExchange(ex *exchangeEntity, m *amqp.ExchangeDeclare, vhost string) error {
	const cls, mth = amqp.ClassExchange, 10
	switch {
	case ex.kind.String() != m.Type:
		return inequivalent("exchange", "type", ex.name, vhost, m.Type, ex.kind.String(), cls, mth)
	case ex.durable != m.Durable:
		return inequivalent("exchange", "durable", ex.name, vhost, m.Durable, ex.durable, cls, mth)
	case ex.autoDelete != m.AutoDelete:
		return inequivalent("exchange", "auto_delete", ex.name, vhost, m.AutoDelete, ex.autoDelete, cls, mth)
	case ex.internal != m.Internal:
		return inequivalent("exchange", "internal", ex.name, vhost, m.Internal, ex.internal, cls, mth)
	}
	if !equalArgs(ex.args, m.Arguments) {
		return amqp.Errorf(amqp.PreconditionFailed, cls, mth,
			"inequivalent arg 'arguments' for exchange '%s' in vhost '%s'", ex.name, vhost)
	}
	return nil
}

// equalArgs compares argument tables, treating nil and empty as equal.
func equalArgs(a, b amqp.Table) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
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
			"exchange name '%s' contains reserved prefix 'amq.*'", m.Exchange)
	}
	v.mu.Lock()
	ex := v.exchanges[m.Exchange]
	if ex != nil {
		if m.IfUnused && ex.router.Len() > 0 {
			v.mu.Unlock()
			return amqp.Errorf(amqp.PreconditionFailed, cls, mth, "exchange '%s' in vhost '%s' in use", m.Exchange, v.name)
		}
		v.deleteExchangeLocked(ex)
	}
	v.mu.Unlock()
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
	if dest == "" || src == "" {
		return accessRefusedDefault(cls, mth)
	}
	v.mu.Lock()
	s, d := v.exchanges[src], v.exchanges[dest]
	switch {
	case d == nil:
		v.mu.Unlock()
		return notFoundExchange(dest, v.name, cls, mth)
	case s == nil:
		v.mu.Unlock()
		return notFoundExchange(src, v.name, cls, mth)
	}
	if err := validateBindArgs(s, args, cls, mth); err != nil {
		v.mu.Unlock()
		return err
	}
	b := exchange.Binding{Destination: exchange.Destination{Kind: exchange.DestExchange, Name: dest}, Key: key, Args: args}
	if bind {
		s.router.Bind(b)
	} else if s.router.Unbind(b) {
		v.autoDeleteLocked(s)
	}
	v.mu.Unlock()
	if !noWait {
		if bind {
			ch.c.send(ch.id, &amqp.ExchangeBindOk{})
		} else {
			ch.c.send(ch.id, &amqp.ExchangeUnbindOk{})
		}
	}
	return nil
}

func validateBindArgs(s *exchangeEntity, args amqp.Table, cls, mth uint16) error {
	if s.kind != exchange.Headers {
		return nil
	}
	if err := exchange.ValidateHeadersArgs(args); err != nil {
		return amqp.Errorf(amqp.PreconditionFailed, cls, mth, "%v", err)
	}
	return nil
}
