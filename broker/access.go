package broker

import (
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
)

// Access control, as RabbitMQ's internal authorisation backend does it
// (https://www.rabbitmq.com/docs/access-control):
//
//	operation                   configure   write              read
//	exchange.declare            exchange    AE (on creation)   exchange (AE, on creation)
//	exchange.declare passive    -           -                  -
//	exchange.delete             exchange
//	queue.declare               queue       DLX (on creation)  queue (DLX, on creation)
//	queue.declare passive       -           -                  -
//	queue.delete                queue
//	exchange.bind/unbind                    destination        source
//	queue.bind/unbind                       queue              exchange
//	basic.publish                           exchange
//	basic.get/consume                                          queue
//	queue.purge                                                queue
//
// A pattern is a regular expression matched anywhere in the resource name
// (re:run, unanchored: write ^...$ to anchor); the empty pattern is "^$".
// The default exchange is named "amq.default" in checks. A server-named
// queue is checked under the name the server chose ("amq.gen-...").
// Topic permissions further restrict, per topic exchange, the routing keys
// a user may publish with (write) and bind with (read).
//
// Checks run at the top of the method handlers, with no lock held; each
// takes Broker.mu briefly to read the user's compiled patterns. Publishing
// is the exception: its verdict is cached per channel (see publishAccess).

// permKind is one of the three permissions.
type permKind uint8

const (
	permConfigure permKind = iota
	permWrite
	permRead
)

func (k permKind) String() string {
	switch k {
	case permConfigure:
		return "configure"
	case permWrite:
		return "write"
	}
	return "read"
}

// permPatterns are a permission's compiled patterns, indexed by permKind;
// nil matches nothing (a pattern that does not compile).
type permPatterns [3]*regexp.Regexp

// compilePattern compiles a permission pattern as RabbitMQ reads it.
func compilePattern(p string) (*regexp.Regexp, error) {
	if p == "" {
		p = "^$"
	}
	return regexp.Compile(p)
}

// compilePermission compiles configure, write and read. A pattern that
// does not compile (only possible for recovered definitions: the admin
// methods refuse them) matches nothing.
func compilePermission(configure, write, read string) *permPatterns {
	var re permPatterns
	for i, p := range []string{configure, write, read} {
		re[i], _ = compilePattern(p)
	}
	return &re
}

// validatePatterns reports the first pattern that does not compile.
func validatePatterns(patterns ...string) error {
	for _, p := range patterns {
		if _, err := compilePattern(p); err != nil {
			return err
		}
	}
	return nil
}

// topicPermKey names a topic permission of a user: vhost and exchange.
type topicPermKey struct{ vhost, exchange string }

// topicPermission is a user's write and read routing-key patterns on a
// topic exchange, with {username} and {vhost} already expanded.
type topicPermission struct {
	write, read string
	re          [2]*regexp.Regexp // write, read
	storeID     uint64
}

// newTopicPermission expands the variables of write and read as RabbitMQ
// does (plain substitution, no escaping) and compiles them.
func newTopicPermission(username, vhost, write, read string) (topicPermission, error) {
	tp := topicPermission{write: write, read: read}
	r := strings.NewReplacer("{username}", username, "{vhost}", vhost)
	for i, p := range []string{write, read} {
		re, err := compilePattern(r.Replace(p))
		if err != nil {
			return tp, err
		}
		tp.re[i] = re
	}
	return tp, nil
}

// permissions returns the connection user's patterns on its vhost, or nil.
func (c *conn) permissions() *permPatterns {
	c.b.mu.Lock()
	p, ok := c.user.perms[c.vhost.name]
	c.b.mu.Unlock()
	if !ok {
		return nil
	}
	return p.re
}

// permitted reports whether the connection's user has perm on the named
// resource of its vhost.
func (c *conn) permitted(perm permKind, name string) bool {
	re := c.permissions()
	return re != nil && re[perm] != nil && re[perm].MatchString(name)
}

// checkResource is rabbit_access_control:check_resource_access: 403 unless
// the user has perm on the resource (kind is "exchange" or "queue").
func (c *conn) checkResource(perm permKind, kind, name string, cls, mth uint16) error {
	if kind == "exchange" && name == "" {
		name = "amq.default"
	}
	if c.permitted(perm, name) {
		return nil
	}
	return amqp.Errorf(amqp.AccessRefused, cls, mth, "%s access to %s '%s' in vhost '%s' refused for user '%s'",
		perm, kind, name, c.vhost.name, c.user.name)
}

// topicPattern returns the user's topic pattern for perm (write or read)
// on the exchange, or nil when there is no topic permission (all keys
// allowed).
func (c *conn) topicPattern(perm permKind, exchangeName string) *regexp.Regexp {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	tp, ok := c.user.topicPerms[topicPermKey{c.vhost.name, exchangeName}]
	if !ok {
		return nil
	}
	if perm == permWrite {
		return tp.re[0]
	}
	return tp.re[1]
}

// checkTopic is rabbit_access_control:check_topic_access for a topic
// exchange: 403 unless the routing key matches the user's topic pattern.
func (c *conn) checkTopic(perm permKind, ex *exchangeEntity, key string, cls, mth uint16) error {
	if ex == nil || ex.kind != exchange.Topic {
		return nil
	}
	re := c.topicPattern(perm, ex.name)
	if re == nil || re.MatchString(key) {
		return nil
	}
	return c.topicRefused(perm, ex.name, key, cls, mth)
}

func (c *conn) topicRefused(perm permKind, exchangeName, key string, cls, mth uint16) error {
	return amqp.Errorf(amqp.AccessRefused, cls, mth,
		"%s access to topic '%s' in exchange '%s' in vhost '%s' refused for user '%s'",
		perm, key, exchangeName, c.vhost.name, c.user.name)
}

// existingExchange returns the named exchange of the connection's vhost or nil.
func (c *conn) existingExchange(name string) *exchangeEntity {
	return c.vhost.exchange(name)
}

// accessExchangeDeclare: configure on the exchange; when the declare
// creates it with an alternate exchange, read on it and write on the AE.
func (ch *channel) accessExchangeDeclare(m *amqp.ExchangeDeclare) error {
	const cls, mth = amqp.ClassExchange, 10
	if m.Passive {
		return nil
	}
	c := ch.c
	if err := c.checkResource(permConfigure, "exchange", m.Exchange, cls, mth); err != nil {
		return err
	}
	ae, ok := m.Arguments["alternate-exchange"].(string)
	if !ok || c.existingExchange(m.Exchange) != nil {
		return nil
	}
	if err := c.checkResource(permRead, "exchange", m.Exchange, cls, mth); err != nil {
		return err
	}
	return c.checkResource(permWrite, "exchange", ae, cls, mth)
}

// accessExchangeDelete: configure on the exchange.
func (ch *channel) accessExchangeDelete(name string) error {
	return ch.c.checkResource(permConfigure, "exchange", name, amqp.ClassExchange, 20)
}

// accessQueueDeclare: configure on the queue (its generated name for a
// server-named one); when the declare creates it with a dead-letter
// exchange, read on the queue and write on the DLX.
func (ch *channel) accessQueueDeclare(name string, args amqp.Table) error {
	const cls, mth = amqp.ClassQueue, 10
	c := ch.c
	if err := c.checkResource(permConfigure, "queue", name, cls, mth); err != nil {
		return err
	}
	dlx, ok := args["x-dead-letter-exchange"].(string)
	if !ok {
		return nil
	}
	v := c.vhost
	v.mu.RLock()
	exists := v.queues[name] != nil
	v.mu.RUnlock()
	if exists {
		return nil
	}
	if err := c.checkResource(permRead, "queue", name, cls, mth); err != nil {
		return err
	}
	return c.checkResource(permWrite, "exchange", dlx, cls, mth)
}

// accessQueue checks perm on a queue named in a method; the empty name is
// the channel's last declared queue, resolved first as RabbitMQ does.
// queue.delete needs configure; basic.consume, basic.get and queue.purge
// need read.
func (ch *channel) accessQueue(perm permKind, name string, cls, mth uint16) error {
	name, err := ch.expandQueueName(name, cls, mth)
	if err != nil {
		return err
	}
	return ch.c.checkResource(perm, "queue", name, cls, mth)
}

// accessQueueBind (queue.bind and queue.unbind): write on the queue, read
// on the exchange, and read on the routing key of a topic exchange.
func (ch *channel) accessQueueBind(queueName, exchangeName, key string, cls, mth uint16) error {
	return ch.accessBind("queue", queueName, exchangeName, key, cls, mth)
}

// accessExchangeBind (exchange.bind and exchange.unbind): write on the
// destination, read on the source, and read on the routing key of a topic
// source.
func (ch *channel) accessExchangeBind(dest, src, key string, cls, mth uint16) error {
	return ch.accessBind("exchange", dest, src, key, cls, mth)
}

func (ch *channel) accessBind(destKind, dest, src, key string, cls, mth uint16) error {
	c := ch.c
	if err := c.checkResource(permWrite, destKind, dest, cls, mth); err != nil {
		return err
	}
	if dest == "" || src == "" {
		return nil // the handler refuses the default exchange
	}
	if err := c.checkResource(permRead, "exchange", src, cls, mth); err != nil {
		return err
	}
	return c.checkTopic(permRead, c.existingExchange(src), key, cls, mth)
}

// publishAccess caches a channel's publish permission verdicts so that a
// publish costs one atomic load and two string compares, not a regular
// expression: the last exchange published to and whether write on it is
// allowed; for a topic exchange, the topic write pattern and the verdict
// on the last routing key. gen is Broker.permGen when they were taken:
// any permission change invalidates them. Reader goroutine only.
type publishAccess struct {
	gen      uint64
	exchange string
	ok       bool
	valid    bool

	topicGen      uint64
	topicExchange string
	topic         *regexp.Regexp
	topicValid    bool
	key           string
	keyOK         bool
	keyValid      bool
}

// accessPublish: write on the exchange (cached per channel).
func (ch *channel) accessPublish(exchangeName string) error {
	c := ch.c
	pa := &ch.access
	gen := c.b.permGen.Load()
	if !pa.valid || pa.gen != gen || pa.exchange != exchangeName {
		name := exchangeName
		if name == "" {
			name = "amq.default"
		}
		*pa = publishAccess{gen: gen, exchange: exchangeName, ok: c.permitted(permWrite, name), valid: true,
			topicGen: pa.topicGen, topicExchange: pa.topicExchange, topic: pa.topic, topicValid: pa.topicValid}
	}
	if pa.ok {
		return nil
	}
	return c.checkResource(permWrite, "exchange", exchangeName, amqp.ClassBasic, 40)
}

// accessPublishTopic: write on the routing key of a topic exchange
// (cached per channel).
func (ch *channel) accessPublishTopic(ex *exchangeEntity, key string) error {
	if ex.kind != exchange.Topic {
		return nil
	}
	c := ch.c
	pa := &ch.access
	gen := c.b.permGen.Load()
	if !pa.topicValid || pa.topicGen != gen || pa.topicExchange != ex.name {
		pa.topicGen, pa.topicExchange, pa.topicValid = gen, ex.name, true
		pa.topic = c.topicPattern(permWrite, ex.name)
		pa.keyValid = false
	}
	if pa.topic == nil {
		return nil
	}
	if !pa.keyValid || pa.key != key {
		pa.key, pa.keyOK, pa.keyValid = key, pa.topic.MatchString(key), true
	}
	if pa.keyOK {
		return nil
	}
	return c.topicRefused(permWrite, ex.name, key, amqp.ClassBasic, 40)
}

// loopbackOnly reports whether username may only connect from a loopback
// address (Config.LoopbackUsers) and addr is not one.
func (b *Broker) loopbackOnly(username string, addr net.Addr) bool {
	if !slices.Contains(b.cfg.LoopbackUsers, username) {
		return false
	}
	return !isLoopback(addr)
}

// LoopbackOnly reports whether username may log in only from a loopback
// address (Config.LoopbackUsers) and remoteAddr (host:port, as
// http.Request.RemoteAddr) is not one: the management API refuses such a
// login as RabbitMQ's does.
func (b *Broker) LoopbackOnly(username, remoteAddr string) bool {
	if !slices.Contains(b.cfg.LoopbackUsers, username) {
		return false
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return true
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

func isLoopback(addr net.Addr) bool {
	var ip net.IP
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip = a.IP
	default:
		host, _, err := net.SplitHostPort(addr.String())
		if err != nil {
			return false
		}
		ip = net.ParseIP(host)
	}
	return ip != nil && ip.IsLoopback()
}
