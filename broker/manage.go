package broker

import (
	"fmt"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Management operations on exchanges, queues, bindings and messages, for
// the HTTP API and definitions import. They run the very code the AMQP
// methods run, on a detached channel of a connection that has no socket
// (mgmtChannel), so validation, equivalence checks, durability and reply
// codes are the same. Errors are ErrNotFound for an unknown vhost and
// *amqp.Error as a client would get it otherwise.

// mgmtChannel returns a channel on vhostName, acting for the named user
// (or, with an empty name, for the broker itself with full permissions).
// Its connection has no socket and no goroutines; what the methods send to
// it is dropped with it.
func (b *Broker) mgmtChannel(vhostName, username string) (*channel, error) {
	v := b.vhost(vhostName)
	if v == nil && b.syncDefinitions() {
		v = b.vhost(vhostName)
	}
	if v == nil {
		return nil, fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	var u *user
	if username != "" {
		b.mu.Lock()
		u = b.users[username]
		b.mu.Unlock()
		if u == nil {
			return nil, fmt.Errorf("user %q: %w", username, ErrNotFound)
		}
	} else {
		u = &user{name: "warren-internal", tags: []string{"administrator"}}
		u.setPermission(vhostName, permission{configure: ".*", write: ".*", read: ".*"})
	}
	c := &conn{
		b: b, log: connLog{base: b.connLog}, vhost: v, user: u, vhostNm: v.name, userNm: u.name,
		out: newOutbound(0), channels: make(map[uint16]*channel),
		frameMax: b.cfg.FrameMax, channelMax: b.cfg.ChannelMax,
	}
	return &channel{c: c, consumers: make(map[string]*consumer)}, nil
}

// QueueSpec is a queue to declare.
type QueueSpec struct {
	Name                string
	Durable, AutoDelete bool
	Arguments           amqp.Table
}

// DeclareQueue declares a queue as queue.declare does (never exclusive),
// acting for user ("" = the broker). Redeclaring an equivalent queue is
// not an error.
func (b *Broker) DeclareQueue(vhostName, username string, q QueueSpec) error {
	ch, err := b.mgmtChannel(vhostName, username)
	if err != nil {
		return err
	}
	if q.Name == "" {
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10, "queue name must not be empty")
	}
	return ch.queueDeclare(&amqp.QueueDeclare{
		Queue: q.Name, Durable: q.Durable, AutoDelete: q.AutoDelete, Arguments: q.Arguments, NoWait: true,
	})
}

// DeleteQueue deletes a queue, refusing with 406 when ifUnused and it has
// consumers or ifEmpty and it has ready messages. It returns the number
// of ready messages dropped.
func (b *Broker) DeleteQueue(vhostName, name string, ifUnused, ifEmpty bool) (int, error) {
	v := b.vhost(vhostName)
	if v == nil {
		return 0, fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	if qe == nil {
		return 0, fmt.Errorf("queue %q in vhost %q: %w", name, vhostName, ErrNotFound)
	}
	return v.deleteQueue(qe, ifUnused, ifEmpty)
}

// PurgeQueue drops a queue's ready messages and returns how many.
func (b *Broker) PurgeQueue(vhostName, name string) (int, error) {
	qe, err := b.queueEntity(vhostName, name)
	if err != nil {
		return 0, err
	}
	qe.mu.Lock()
	defer qe.mu.Unlock()
	if qe.deleted {
		return 0, fmt.Errorf("queue %q in vhost %q: %w", name, vhostName, ErrNotFound)
	}
	return qe.purgeLocked(), nil
}

func (b *Broker) queueEntity(vhostName, name string) (*queueEntity, error) {
	v := b.vhost(vhostName)
	if v == nil {
		return nil, fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	v.mu.RLock()
	qe := v.queues[name]
	v.mu.RUnlock()
	if qe == nil {
		return nil, fmt.Errorf("queue %q in vhost %q: %w", name, vhostName, ErrNotFound)
	}
	return qe, nil
}

// ExchangeSpec is an exchange to declare.
type ExchangeSpec struct {
	Name, Type                    string
	Durable, AutoDelete, Internal bool
	Arguments                     amqp.Table
}

// DeclareExchange declares an exchange as exchange.declare does.
func (b *Broker) DeclareExchange(vhostName, username string, x ExchangeSpec) error {
	ch, err := b.mgmtChannel(vhostName, username)
	if err != nil {
		return err
	}
	return ch.exchangeDeclare(&amqp.ExchangeDeclare{
		Exchange: x.Name, Type: x.Type, Durable: x.Durable, AutoDelete: x.AutoDelete,
		Internal: x.Internal, Arguments: x.Arguments, NoWait: true,
	})
}

// DeleteExchange deletes an exchange as exchange.delete does; an unknown
// one is ErrNotFound.
func (b *Broker) DeleteExchange(vhostName, username, name string, ifUnused bool) error {
	ch, err := b.mgmtChannel(vhostName, username)
	if err != nil {
		return err
	}
	if _, err := b.Exchange(vhostName, name); err != nil {
		return err
	}
	return ch.exchangeDelete(&amqp.ExchangeDelete{Exchange: name, IfUnused: ifUnused, NoWait: true})
}

// Bind binds (bind true) or unbinds a queue, or an exchange when
// toExchange, to source, as queue.bind and exchange.bind do.
func (b *Broker) Bind(vhostName, username, source, dest string, toExchange bool, key string, args amqp.Table, bind bool) error {
	ch, err := b.mgmtChannel(vhostName, username)
	if err != nil {
		return err
	}
	if toExchange {
		return ch.exchangeBind(dest, source, key, args, true, bind)
	}
	if dest == "" {
		return notFoundQueue(dest, vhostName, amqp.ClassQueue, 20)
	}
	return ch.queueBind(dest, source, key, args, true, bind)
}

// Publish publishes a message as basic.publish does (not mandatory) and
// reports whether any queue took it.
func (b *Broker) Publish(vhostName, username, exchangeName, key string, props amqp.Properties, body []byte) (bool, error) {
	ch, err := b.mgmtChannel(vhostName, username)
	if err != nil {
		return false, err
	}
	v := ch.c.vhost
	ex := v.exchange(exchangeName)
	if ex == nil && b.syncDefinitions() {
		ex = v.exchange(exchangeName)
	}
	if ex == nil {
		return false, notFoundExchange(exchangeName, v.name, amqp.ClassBasic, 40)
	}
	// As basic.publish: write on the exchange, and on the routing key of a
	// topic exchange.
	if err := ch.accessPublish(exchangeName); err != nil {
		return false, err
	}
	if ex.internal {
		return false, amqp.Errorf(amqp.AccessRefused, amqp.ClassBasic, 40,
			"cannot publish to internal exchange '%s' in vhost '%s'", exchangeName, v.name)
	}
	h := amqp.ContentHeader{ClassID: amqp.ClassBasic, BodySize: uint64(len(body)), Properties: props}
	header, err := h.AppendTo(nil)
	if err != nil {
		return false, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 40, "properties: %v", err)
	}
	if uint64(len(body)) > b.cfg.MaxMessageSize {
		return false, amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 40,
			"message size %d is larger than configured max size %d", len(body), b.cfg.MaxMessageSize)
	}
	msg := &queue.Message{
		Exchange: exchangeName, RoutingKey: key, Header: header, Body: body,
		Persistent: props.DeliveryMode == 2, Priority: props.Priority,
	}
	return ch.route(ex, false, msg, 0), nil
}

// GotMessage is a message taken by Get.
type GotMessage struct {
	Exchange, RoutingKey string
	Redelivered          bool
	Properties           amqp.Properties
	Body                 []byte
	// MessageCount is the number of ready messages left after this one
	// was taken.
	MessageCount int
}

// Get takes up to count messages from a queue as basic.get does, then
// returns them to the queue (requeue, marked redelivered) or settles them
// (dropped), as the management API's get does.
//
// username ("" for the broker itself) needs read permission on the queue,
// as for basic.get.
func (b *Broker) Get(vhostName, username, name string, count int, requeue bool) ([]GotMessage, error) {
	qe, err := b.queueEntity(vhostName, name)
	if err != nil {
		return nil, err
	}
	ch, err := b.mgmtChannel(vhostName, username)
	if err != nil {
		return nil, err
	}
	if err := ch.c.checkResource(permRead, "queue", name, amqp.ClassBasic, 70); err != nil {
		return nil, err
	}
	qe.mu.Lock()
	if qe.deleted {
		qe.mu.Unlock()
		return nil, fmt.Errorf("queue %q in vhost %q: %w", name, vhostName, ErrNotFound)
	}
	var taken []queue.Entry
	var out []GotMessage
	dead := false
	for range count {
		e, ok, d := qe.getPagedLocked(false)
		dead = dead || d
		if !ok {
			break
		}
		qe.journalDelivery(false, &e)
		qe.stats.countGet(false, e.Redelivered)
		taken = append(taken, e)
		gm := GotMessage{
			Exchange: e.Msg.Exchange, RoutingKey: e.Msg.RoutingKey, Redelivered: e.Redelivered,
			Body: e.Msg.Body, MessageCount: qe.q.Ready(),
		}
		var h amqp.ContentHeader
		if err := amqp.DecodeContentHeader(qe.deliveryMessage(&e, true).Header, &h); err == nil {
			gm.Properties = h.Properties
		}
		out = append(out, gm)
	}
	for _, e := range taken {
		if requeue {
			if qe.returnLocked(e.Seq) {
				dead = true
			}
		} else {
			qe.settleLocked(e.Seq)
			qe.stats.ack++
		}
	}
	qe.dispatchLocked()
	qe.mu.Unlock()
	if dead {
		qe.flushDead()
	}
	return out, nil
}

// Authenticate checks a username and password as the AMQP handshake
// does and describes the user.
func (b *Broker) Authenticate(username, password string) (UserInfo, bool) {
	u := b.authenticate(username, password)
	if u == nil {
		return UserInfo{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return UserInfo{Name: u.name, HashAlgorithm: u.algorithm, Tags: append([]string(nil), u.tags...)}, true
}

// UserVHosts lists the vhosts the user has permissions on.
func (b *Broker) UserVHosts(username string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.users[username]
	if u == nil {
		return nil
	}
	out := make([]string, 0, len(u.perms))
	for v := range u.perms {
		if b.vhosts[v] != nil {
			out = append(out, v)
		}
	}
	return out
}
