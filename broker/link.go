package broker

import (
	"bytes"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Remote queues and the node link. In a cluster (Config.NodeName and
// Config.Link set) a classic queue lives on one node, its home, chosen
// when it is declared (placeQueue) and carried in the declare command, so
// every node applies the same placement. On its home node the queue is a
// plain local queue; every other node has a remote entry for it (a
// queueEntity with home set): the name is taken, bindings route to it, the
// management API lists it with its node. What a client does with a remote
// queue goes to the home node over the node link (linkPeer, one per peer
// node, a stream of Config.Link; framing in linkproto.go), which the home
// node serves (ServeLink, linkserve.go).

// Link reaches the brokers of the other nodes of the cluster; the cluster
// package implements it over its cluster port.
type Link interface {
	// Nodes lists the cluster's nodes, this one included.
	Nodes() []string
	// Dial opens a link stream to node's broker, which serves it with
	// Broker.ServeLink.
	Dial(node string, timeout time.Duration) (net.Conn, error)
}

// linkDialTimeout bounds a link dial; linkRetryMax is the longest wait
// between dials to a node that is down.
const (
	linkDialTimeout = 5 * time.Second
	linkRetryMin    = 100 * time.Millisecond
	linkRetryMax    = 2 * time.Second
	// linkCallTimeout bounds a request that waits for its reply (consume,
	// get, status, purge).
	linkCallTimeout = 30 * time.Second
)

// remoteHome is where a remote queue entry lives.
type remoteHome struct {
	node string
	peer *linkPeer
}

// homeDown is RabbitMQ's reply for a queue whose home node is unreachable.
func homeDown(qe *queueEntity, cls, mth uint16) error {
	kind := "durable"
	if !qe.durable {
		kind = "transient"
	}
	return amqp.Errorf(amqp.NotFound, cls, mth, "home node '%s' of %s queue '%s' in vhost '%s' is down or inaccessible",
		qe.home.node, kind, qe.name, qe.vhost.name)
}

// local reports whether node names this node.
func (b *Broker) local(node string) bool {
	return node == "" || node == b.cfg.NodeName || b.cfg.Link == nil
}

// placeQueue chooses the home node of a new queue: RabbitMQ's queue
// leader locator, from the x-queue-leader-locator argument or the
// queue-leader-locator policy: client-local (the default: this node) or
// balanced (the node with the fewest queues). Exclusive queues stay with
// their connection.
func (b *Broker) placeQueue(v *vhost, name string, args amqp.Table, exclusive bool) string {
	self := b.cfg.NodeName
	if self == "" || b.cfg.Link == nil || exclusive {
		return self
	}
	loc, _ := args["x-queue-leader-locator"].(string)
	if loc == "" {
		v.mu.RLock()
		if p := matchPolicy(v.policies.user, name, true); p != nil {
			loc, _ = p.def["queue-leader-locator"].(string)
		}
		v.mu.RUnlock()
	}
	if loc != "balanced" {
		return self
	}
	nodes := b.cfg.Link.Nodes()
	if len(nodes) == 0 {
		return self
	}
	count := make(map[string]int, len(nodes))
	for _, n := range nodes {
		count[n] = 0
	}
	vhosts := b.allVHosts()
	for _, v := range vhosts {
		v.mu.RLock()
		for _, qe := range v.queues {
			n := self
			if qe.home != nil {
				n = qe.home.node
			}
			if _, ok := count[n]; ok {
				count[n]++
			}
		}
		v.mu.RUnlock()
	}
	slices.Sort(nodes)
	best := self
	for _, n := range nodes {
		if count[n] < count[best] {
			best = n
		}
	}
	return best
}

// links is the broker's link peers, by node name.
type links struct {
	mu     sync.Mutex
	peers  map[string]*linkPeer
	served map[*linkServer]struct{}
	closed bool
	wg     sync.WaitGroup
	done   chan struct{}
}

// peer returns the link to node, starting it if needed; nil once the
// broker is closed.
func (b *Broker) peer(node string) *linkPeer {
	l := &b.links
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	if p := l.peers[node]; p != nil {
		return p
	}
	if l.peers == nil {
		l.peers = make(map[string]*linkPeer)
		l.done = make(chan struct{})
	}
	p := &linkPeer{b: b, node: node, first: make(chan struct{}), waiters: make(map[uint64]*linkWaiter),
		consumers: make(map[uint64]*consumer), log: b.log.With(zap.String("peer", node))}
	l.peers[node] = p
	l.wg.Add(1)
	go p.run(l.done)
	return p
}

// closeLinks stops the link peers and waits for them.
func (b *Broker) closeLinks() {
	l := &b.links
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	peers := make([]*linkPeer, 0, len(l.peers))
	for _, p := range l.peers {
		peers = append(peers, p)
	}
	if l.done != nil {
		close(l.done)
	}
	l.mu.Unlock()
	for _, p := range peers {
		p.mu.Lock()
		conn := p.conn
		p.mu.Unlock()
		if conn != nil {
			conn.Close()
		}
	}
	l.wg.Wait()
	b.closeServedLinks()
}

// linkPeer is this node's link to one peer's broker: the requests of this
// node's clients for queues homed there, and the deliveries to their
// consumers. Its goroutine (run) dials, reads, and redials when the link
// breaks; while it is down the peer's queues are unavailable.
type linkPeer struct {
	b    *Broker
	node string
	log  *zap.Logger
	// first is closed once the first dial has ended, either way.
	first chan struct{}

	// mu guards the fields below; lock order: queue → linkPeer.mu →
	// linkWriter.mu.
	mu   sync.Mutex
	w    *linkWriter // nil while down
	conn net.Conn
	// reconnecting is set while the link is down after it broke, until a
	// dial fails (the node is down) or succeeds (forwardLocked).
	reconnecting bool
	next         uint64
	// waiters are the requests waiting for their replies, by id.
	waiters map[uint64]*linkWaiter
	// consumers are this node's consumers of the peer's queues, by
	// handle.
	consumers map[uint64]*consumer
}

// linkWaiter is a request waiting for its reply: a publish's confirm
// (ch, seq), or a call (reply).
type linkWaiter struct {
	ch  *channel
	seq uint64
	// done, when set, takes a publish's confirm instead of ch (a dead
	// letter republished at least once, quorumdlx.go).
	done  func(error)
	reply chan linkReply
	// cons is the consumer a consume request registers once its reply
	// says ok, and noWait whether consume-ok is left out.
	cons   *consumer
	noWait bool
}

// linkReply is a reply frame, its message copied out of the frame.
type linkReply struct {
	code  uint16
	text  string
	a, b  uint64
	found bool
	seq   uint64
	redel bool
	msg   *queue.Message
	err   error
	// data is the payload of an lkStreamData reply after its request id.
	data []byte
}

// awaitFirst waits, if need be, for the link's first dial to end, so that
// a queue just declared elsewhere is not taken for down. No lock held.
func (p *linkPeer) awaitFirst() {
	select {
	case <-p.first:
		return
	default:
	}
	t := time.NewTimer(linkDialTimeout)
	select {
	case <-p.first:
	case <-t.C:
	}
	t.Stop()
}

// up reports whether the link is up, waiting for the first dial to end.
func (p *linkPeer) up() bool {
	p.awaitFirst()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w != nil
}

func (p *linkPeer) run(done chan struct{}) {
	defer p.b.links.wg.Done()
	firstDone := false
	wait := linkRetryMin
	for {
		conn, err := p.b.cfg.Link.Dial(p.node, linkDialTimeout)
		broke := false
		if err == nil {
			wait = linkRetryMin
			w := newLinkWriter(conn)
			p.mu.Lock()
			p.w, p.conn, p.reconnecting = w, conn, false
			p.mu.Unlock()
			upAt := time.Now()
			select {
			case <-done:
				conn.Close()
			default:
			}
			if !firstDone {
				close(p.first)
				firstDone = true
			}
			p.log.Info("node link up")
			go w.run()
			err = p.read(conn)
			w.close()
			conn.Close()
			<-w.done
			p.down()
			p.log.Info("node link down", zap.Error(err))
			// A link that broke at once (the peer took the dial but
			// not the link) waits before the next dial, as a failed
			// dial does.
			broke = time.Since(upAt) >= linkRetryMin
		} else {
			p.mu.Lock()
			p.reconnecting = false
			p.mu.Unlock()
			p.log.Debug("node link dial failed", zap.Error(err))
		}
		if !firstDone {
			close(p.first)
			firstDone = true
		}
		if broke {
			// Redial at once: until that dial ends, the link is
			// reconnecting, not down (forwardLocked).
			select {
			case <-done:
				return
			default:
			}
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, linkRetryMax)
	}
}

// down fails the link's waiting requests and cancels its consumers.
func (p *linkPeer) down() {
	p.mu.Lock()
	p.w, p.conn, p.reconnecting = nil, nil, true
	waiters := p.waiters
	p.waiters = make(map[uint64]*linkWaiter)
	conss := p.consumers
	p.consumers = make(map[uint64]*consumer)
	p.mu.Unlock()
	for _, wt := range waiters {
		p.finish(wt, linkReply{err: errLinkDown})
	}
	for _, cons := range conss {
		cons.ch.serverCancel(cons)
	}
}

// finish hands a reply to its waiter.
func (p *linkPeer) finish(wt *linkWaiter, r linkReply) {
	if wt.reply != nil {
		if wt.cons != nil {
			if r.err == nil && r.code == 0 {
				// consume-ok goes out before any delivery the link reads
				// after this reply.
				ch := wt.cons.ch
				ch.mu.Lock()
				ch.consumers[wt.cons.Tag] = wt.cons
				ch.mu.Unlock()
				if !wt.noWait {
					ch.c.send(ch.id, &amqp.BasicConsumeOk{ConsumerTag: wt.cons.Tag})
				}
			} else {
				p.mu.Lock()
				delete(p.consumers, wt.cons.remote)
				p.mu.Unlock()
			}
		}
		wt.reply <- r
		return
	}
	var err error
	if r.err != nil || r.code != 0 {
		err = errLinkDown
		if r.err == nil {
			err = errRejectPublish
		}
	}
	if wt.done != nil {
		wt.done(err)
		return
	}
	wt.ch.journaled(wt.seq, err)
}

// read reads the peer's frames until the stream ends.
func (p *linkPeer) read(conn net.Conn) error {
	r := newLinkReader(conn, p.b.cfg.MaxMessageSize)
	for {
		t, payload, err := r.next()
		if err != nil {
			return err
		}
		d := linkDecoder{b: payload}
		switch t {
		case lkReply:
			id := d.u()
			rep := linkReply{code: uint16(d.u()), text: d.s(), a: d.u(), b: d.u()}
			if len(d.b) > 0 {
				rep.found = true
				rep.seq, rep.redel = d.u(), d.flag()
				rep.msg = decodeLinkMessage(&d)
			}
			if d.err != nil {
				return d.err
			}
			p.mu.Lock()
			wt := p.waiters[id]
			delete(p.waiters, id)
			p.mu.Unlock()
			if wt != nil {
				p.finish(wt, rep)
			}
		case lkStreamData:
			id := d.u()
			if d.err != nil {
				return d.err
			}
			p.mu.Lock()
			wt := p.waiters[id]
			delete(p.waiters, id)
			p.mu.Unlock()
			if wt != nil {
				p.finish(wt, linkReply{data: bytes.Clone(d.b)})
			}
		case lkDeliver:
			h, seq, redel := d.u(), d.u(), d.flag()
			msg := decodeLinkMessage(&d)
			if d.err != nil {
				return d.err
			}
			p.mu.Lock()
			cons := p.consumers[h]
			p.mu.Unlock()
			// A consumer is known until the home node says it ended
			// (lkCancelled, after its last delivery), or the link went
			// down: then the home node returns what it held.
			if cons != nil {
				cons.ch.deliverRemote(cons, seq, redel, msg)
			}
		case lkCancelled:
			h := d.u()
			p.mu.Lock()
			cons := p.consumers[h]
			delete(p.consumers, h)
			p.mu.Unlock()
			if cons != nil {
				cons.ch.serverCancel(cons)
			}
		default:
			return errLinkFrame
		}
	}
}

// decodeLinkMessage reads exchange, routing key, header and body into a
// message of its own.
func decodeLinkMessage(d *linkDecoder) *queue.Message {
	ex, rk := d.s(), d.s()
	hdr, body := d.raw(), d.raw()
	if d.err != nil {
		return nil
	}
	buf := make([]byte, len(hdr)+len(body))
	copy(buf, hdr)
	copy(buf[len(hdr):], body)
	msg := &queue.Message{Exchange: ex, RoutingKey: rk, Header: buf[:len(hdr):len(hdr)], Body: buf[len(hdr):]}
	mode, prio := peekModePriority(msg.Header)
	msg.Persistent, msg.Priority = mode == 2, prio
	return msg
}

func appendLinkMessage(b []byte, msg *queue.Message) []byte {
	b = appendS(b, msg.Exchange)
	b = appendS(b, msg.RoutingKey)
	b = appendS(b, msg.Header)
	return appendS(b, msg.Body)
}

func appendQueueRef(b []byte, qe *queueEntity) []byte {
	b = appendU(b, qe.id)
	b = appendS(b, qe.vhost.name)
	return appendS(b, qe.name)
}

// forwardLocked sends msg to qe's home node; with confirmSeq set, the
// publish's confirm waits for the home node's. It reports whether the
// message went (false: the home node is down or the link over its bound).
// While the link reconnects (it broke and the redial has not failed yet:
// the home node may well be up), a message that did not go fails its
// confirm (basic.nack): a publisher must never be told that a message its
// queue never got is safe. Once a dial has failed the node is down, and the
// queue unavailable as in RabbitMQ: the message is dropped like an
// unroutable one. Hold qe.mu; nothing here blocks.
func (ch *channel) forwardLocked(qe *queueEntity, msg *queue.Message, confirmSeq uint64, throttle *chan struct{}) bool {
	p := qe.home.peer
	p.mu.Lock()
	w := p.w
	if w == nil {
		reconnecting := p.reconnecting
		p.mu.Unlock()
		if reconnecting && confirmSeq != 0 {
			ch.confirms.done(confirmSeq, errLinkDown)
		}
		return false
	}
	id := uint64(0)
	if confirmSeq != 0 {
		p.next++
		id = p.next
		ch.confirms.hold(confirmSeq)
		p.waiters[id] = &linkWaiter{ch: ch, seq: confirmSeq}
	}
	p.mu.Unlock()
	start, ok := w.begin(lkPublish)
	if !ok {
		if id != 0 {
			p.mu.Lock()
			wt := p.waiters[id]
			delete(p.waiters, id)
			p.mu.Unlock()
			if wt != nil {
				ch.confirms.done(confirmSeq, errLinkDown)
			}
		}
		return false
	}
	w.buf = appendU(w.buf, id)
	w.buf = appendQueueRef(w.buf, qe)
	w.buf = appendLinkMessage(w.buf, msg)
	if hold := w.end(start); hold != nil && *throttle == nil {
		*throttle = hold
	}
	qe.stats.publish++
	return true
}

// call sends a request built by fill and waits for its reply. No lock
// held.
func (p *linkPeer) call(t byte, wt *linkWaiter, fill func(b []byte, id uint64) []byte) linkReply {
	return p.callWithin(t, wt, linkCallTimeout, fill)
}

// callWithin is call giving up after timeout.
func (p *linkPeer) callWithin(t byte, wt *linkWaiter, timeout time.Duration, fill func(b []byte, id uint64) []byte) linkReply {
	wt.reply = make(chan linkReply, 1)
	p.mu.Lock()
	w := p.w
	if w == nil {
		p.mu.Unlock()
		return linkReply{err: errLinkDown}
	}
	p.next++
	id := p.next
	p.waiters[id] = wt
	if wt.cons != nil {
		wt.cons.remote = id
		p.consumers[id] = wt.cons
	}
	p.mu.Unlock()
	if start, ok := w.begin(t); ok {
		w.buf = fill(w.buf, id)
		w.end(start)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-wt.reply:
		return r
	case <-timer.C:
		p.mu.Lock()
		delete(p.waiters, id)
		if wt.cons != nil {
			delete(p.consumers, id)
		}
		p.mu.Unlock()
		return linkReply{err: errLinkDown}
	}
}

// sendSettle sends settlements of qe's deliveries seqs.
func (p *linkPeer) sendSettle(op byte, qe *queueEntity, seqs []uint64) {
	p.mu.Lock()
	w := p.w
	p.mu.Unlock()
	if w == nil {
		return
	}
	start, ok := w.begin(lkSettle)
	if !ok {
		return
	}
	w.buf = append(w.buf, op)
	w.buf = appendQueueRef(w.buf, qe)
	w.buf = appendU(w.buf, uint64(len(seqs)))
	for _, s := range seqs {
		w.buf = appendU(w.buf, s)
	}
	w.end(start)
}

// settleRemote sends the settlement op of the run of deliveries ps[i:]
// of remote queue qe and returns the index after the run.
func (ch *channel) settleRemote(op byte, ps []pending, i int) int {
	qe := ps[i].qe
	seqs := make([]uint64, 0, len(ps)-i)
	j := i
	for ; j < len(ps) && ps[j].qe == qe; j++ {
		seqs = append(seqs, ps[j].seq)
	}
	qe.home.peer.sendSettle(op, qe, seqs)
	return j
}

// deliverRemote writes a delivery the home node sent for cons, a consumer
// of a remote queue. Link reader goroutine.
func (ch *channel) deliverRemote(cons *consumer, seq uint64, redelivered bool, msg *queue.Message) {
	ch.mu.Lock()
	if ch.closed || ch.consumers[cons.Tag] != cons {
		ch.mu.Unlock()
		if !cons.NoAck {
			cons.via.sendSettle(linkReturn, cons.qe, []uint64{seq})
		}
		return
	}
	ch.stats.countDeliveryLocked(cons.NoAck, redelivered)
	ch.nextTag++
	tag := ch.nextTag
	if !cons.NoAck {
		ch.unacked.push(pending{tag: tag, qe: cons.qe, cons: cons, seq: seq, at: ch.c.b.ct.now.Load()})
		ch.globalUnacked.Add(1)
	}
	o := ch.c.out
	o.lock()
	was := len(o.buf) + len(o.segs)
	start := len(o.buf)
	m := amqp.BasicDeliver{ConsumerTag: cons.Tag, DeliveryTag: tag, Redelivered: redelivered,
		Exchange: msg.Exchange, RoutingKey: msg.RoutingKey}
	o.buf = appendMethod(o.buf, ch.id, &m)
	added := ch.appendContentLocked(msg)
	o.unlock(len(o.buf) - start + added)
	ch.mu.Unlock()
	if was == 0 {
		o.wake()
	}
}

// consumeRemote is basic.consume of a remote queue: the home node attaches
// the consumer and feeds it over the link.
func (ch *channel) consumeRemote(qe *queueEntity, m *amqp.BasicConsume, tag string, prio int) error {
	p := qe.home.peer
	if !p.up() {
		return homeDown(qe, amqp.ClassBasic, 20)
	}
	return ch.consumeVia(p, qe, m, tag, prio).asError(qe, amqp.ClassBasic, 20)
}

// consumeVia asks node p to attach a consumer of qe for ch and feed it
// over the link; the reply is p's answer.
func (ch *channel) consumeVia(p *linkPeer, qe *queueEntity, m *amqp.BasicConsume, tag string, prio int) linkReply {
	cons := &consumer{
		consumerArgs: consumerArgs{ID: queue.ConsumerID(ch.c.b.consumerIDs.Add(1)), Tag: tag, NoAck: m.NoAck,
			Exclusive: m.Exclusive, Prefetch: ch.prefetch, Priority: prio},
		ch: ch, qe: qe, via: p,
	}
	return p.call(lkConsume, &linkWaiter{cons: cons, noWait: m.NoWait}, func(b []byte, id uint64) []byte {
		b = appendU(b, id)
		b = appendQueueRef(b, qe)
		b = appendS(b, tag)
		flags := byte(0)
		if m.NoAck {
			flags |= 1
		}
		if m.Exclusive {
			flags |= 2
		}
		b = append(b, flags)
		b = appendU(b, uint64(remotePrefetch(ch.prefetch, ch.globalPrefetch.Load(), m.NoAck)))
		return appendU(b, zigzag(prio))
	})
}

// remotePrefetch is the prefetch a remote queue's home node applies to a
// consumer of a channel with per-consumer prefetch perConsumer and
// channel-wide (basic.qos global) prefetch global: the smaller of those set.
// The home node cannot count the channel's other deliveries, so a channel
// with several consumers of remote queues may hold up to the global limit
// from each; the limit set when the consumer starts is the one it keeps.
func remotePrefetch(perConsumer int, global int32, noAck bool) int {
	if g := int(global); !noAck && g > 0 && (perConsumer == 0 || g < perConsumer) {
		return g
	}
	return perConsumer
}

// asError is the reply's refusal as the client gets it.
func (r linkReply) asError(qe *queueEntity, cls, mth uint16) error {
	return r.refusal(qe, cls, mth, homeDown)
}

// refusal is the peer's refusal of a request for qe, or down's error when
// the peer could not be reached.
func (r linkReply) refusal(qe *queueEntity, cls, mth uint16, down func(*queueEntity, uint16, uint16) error) error {
	switch {
	case r.err != nil:
		return down(qe, cls, mth)
	case r.code != 0:
		// A text the peer made with amqp.Errorf has its reply name
		// already.
		return amqp.Errorf(r.code, cls, mth, "%s", strings.TrimPrefix(r.text, amqp.ReplyText(r.code)+" - "))
	}
	return nil
}

// cancelRemote ends cons, a consumer of a remote queue.
func (p *linkPeer) cancelRemote(cons *consumer) {
	// The consumer stays known until the home node's lkCancelled: the
	// deliveries it sent meanwhile go back (deliverRemote).
	p.mu.Lock()
	_, ok := p.consumers[cons.remote]
	w := p.w
	if w == nil {
		delete(p.consumers, cons.remote)
	}
	p.mu.Unlock()
	if !ok || w == nil {
		return
	}
	if start, ok := w.begin(lkCancel); ok {
		w.buf = appendU(w.buf, cons.remote)
		w.end(start)
	}
}

// queueCall sends a request naming qe (get, status, purge) and waits for
// its reply.
func (p *linkPeer) queueCall(t byte, qe *queueEntity, extra func(b []byte) []byte) linkReply {
	if !p.up() {
		return linkReply{err: errLinkDown}
	}
	return p.call(t, &linkWaiter{}, func(b []byte, id uint64) []byte {
		b = appendU(b, id)
		b = appendQueueRef(b, qe)
		if extra != nil {
			b = extra(b)
		}
		return b
	})
}

// getRemote is basic.get of a remote queue.
func (ch *channel) getRemote(qe *queueEntity, m *amqp.BasicGet) error {
	return ch.getOver(qe.home.peer, qe, m, homeDown, nil)
}

// getOver is basic.get of qe answered by node p; down is the refusal when
// p cannot be reached. hold, when set, records a message taken with
// manual acknowledgement before the client sees it.
func (ch *channel) getOver(p *linkPeer, qe *queueEntity, m *amqp.BasicGet, down func(*queueEntity, uint16, uint16) error, hold func(seq uint64)) error {
	r := p.queueCall(lkGet, qe, func(b []byte) []byte { return appendFlag(b, m.NoAck) })
	if err := r.refusal(qe, amqp.ClassBasic, 70, down); err != nil {
		return err
	}
	if !r.found {
		ch.stats.getEmpty.Add(1)
		ch.c.send(ch.id, &amqp.BasicGetEmpty{})
		return nil
	}
	if hold != nil && !m.NoAck {
		hold(r.seq)
	}
	if ch.sendGetOk(qe, r.seq, m.NoAck, r.redel, r.msg, int(r.a)) {
		ch.c.out.wake()
	}
	return nil
}

// remoteStatus returns a remote queue's ready messages and consumers, as
// its home node counts them.
func (qe *queueEntity) remoteStatus(cls, mth uint16) (msgs, conss int, err error) {
	r := qe.home.peer.queueCall(lkStatus, qe, nil)
	if err := r.asError(qe, cls, mth); err != nil {
		return 0, 0, err
	}
	return int(r.a), int(r.b), nil
}

// remoteDeclareOk answers queue.declare of a remote queue with its home
// node's counts.
func (ch *channel) remoteDeclareOk(noWait bool, qe *queueEntity) error {
	msgs, conss, err := qe.remoteStatus(amqp.ClassQueue, 10)
	if err != nil {
		return err
	}
	if !noWait {
		ch.c.send(ch.id, &amqp.QueueDeclareOk{Queue: qe.name, MessageCount: uint32(msgs), ConsumerCount: uint32(conss)})
	}
	return nil
}

// purgeRemote is queue.purge of a remote queue.
func (ch *channel) purgeRemote(qe *queueEntity, m *amqp.QueuePurge) error {
	r := qe.home.peer.queueCall(lkPurge, qe, nil)
	if err := r.asError(qe, amqp.ClassQueue, 30); err != nil {
		return err
	}
	if !m.NoWait {
		ch.c.send(ch.id, &amqp.QueuePurgeOk{MessageCount: uint32(r.a)})
	}
	return nil
}

// deleteRemote is queue.delete of a remote queue: its home node's counts
// decide if-unused and if-empty and give the count; the deletion is a
// definition command like any other.
func (ch *channel) deleteRemote(qe *queueEntity, m *amqp.QueueDelete) (int, error) {
	const cls, mth = amqp.ClassQueue, 40
	msgs, conss, err := qe.remoteStatus(cls, mth)
	if err != nil {
		msgs, conss = 0, 0 // the home node is down: the definition goes all the same
	}
	v := qe.vhost
	switch {
	case m.IfUnused && conss > 0:
		return 0, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "queue '%s' in vhost '%s' in use", qe.name, v.name)
	case m.IfEmpty && msgs > 0:
		return 0, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "queue '%s' in vhost '%s' not empty", qe.name, v.name)
	}
	r := v.b.propose(&defCmd{Op: opDeleteQueue, VHost: v.name, VHostID: v.storeID, Name: qe.name, ID: qe.id})
	return msgs, r.err
}

// WithHomeCounts fills in, for the queues of qs homed on other nodes, the
// ready messages and consumers their home nodes count, and for the quorum
// queues this node has no replica of, a member's (a status request over
// the node link each, at most 16 at once): Queue and Queues describe what
// this node holds, which for such a queue is nothing. A queue whose home node
// does not answer keeps what it had. For the management API. No lock held.
func (b *Broker) WithHomeCounts(qs []QueueInfo) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range qs {
		qi := &qs[i]
		if qi.Type == "stream" || qi.Type != "quorum" && (qi.Node == "" || b.local(qi.Node)) {
			continue
		}
		v := b.vhost(qi.VHost)
		if v == nil {
			continue
		}
		v.mu.RLock()
		qe := v.queues[qi.Name]
		v.mu.RUnlock()
		member := ""
		switch {
		case qe == nil:
			continue
		case qe.repl != nil && qe.stream == nil:
			// A quorum queue whose group this node is not a member of:
			// a member's counts.
			node, away := b.replAway(qe.repl.group)
			if !away || node == "" {
				continue
			}
			member = node
		case qe.home == nil:
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() {
				<-sem
				wg.Done()
			}()
			var msgs, conss int
			var err error
			if member != "" {
				msgs, conss, err = b.statusReplVia(qe, member, amqp.ClassQueue, 10)
			} else {
				msgs, conss, err = qe.remoteStatus(amqp.ClassQueue, 10)
			}
			if err == nil {
				qi.Ready, qi.Consumers = msgs, conss
			}
		}()
	}
	wg.Wait()
}
