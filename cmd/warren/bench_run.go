package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// benchStopGrace is how long producers get to return once stopped; it
// exceeds the 5 s they spend collecting outstanding confirms.
const benchStopGrace = 10 * time.Second

// waitGroupTimeout waits for wg for at most d and reports whether it is done.
// If not, the helper goroutine lives until wg is done.
func waitGroupTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// benchBarrierTimeout bounds the wait for the broker to take in what the
// producers sent, before the queue depth is read.
const benchBarrierTimeout = 5 * time.Second

// benchMinSize is the smallest body: an 8-byte send timestamp (UnixNano)
// and an 8-byte sequence number, both big-endian.
const benchMinSize = 16

// benchConfig is one load run, filled from the bench command's flags.
type benchConfig struct {
	URI string
	// PublishURI, when set, is where the producers connect; the topology
	// and the consumers stay on URI. With a cluster, this publishes through
	// one node to a queue whose home is another (bench forward).
	PublishURI    string
	Client        string // benchClientRaw ("" too) or benchClientAMQP091
	Producers     int
	Consumers     int
	Queues        int
	QueuePattern  string // fmt pattern with %d, or a plain name for one queue
	Size          int
	Exchange      string // "" = warren-bench-<type>; "amq.default" = the default exchange
	ExchangeType  string
	RoutingKey    string
	TopicBindings int // decoy topic bindings per queue
	Confirm       int // outstanding publisher-confirm window; 0 = no confirms
	AutoAck       bool
	MultiAck      int // ack with multiple=true every MultiAck deliveries
	Prefetch      int
	Persistent    bool
	Rate          float64 // per producer, msgs/s; 0 = unlimited
	QueueArgs     amqp.Table
	ConsumerArgs  amqp.Table // basic.consume arguments
	Connections   int        // producers and consumers share this many; 0 = one each
	Duration      time.Duration
	PMessages     int64 // per producer; 0 = until Duration
	Predeclared   bool
	AutoDelete    bool
	// ConnectOnly > 0 opens that many connections with a channel each,
	// holds them for Duration and does nothing else.
	ConnectOnly        int
	ConnectParallelism int
	// Out receives the per-second lines; nil discards them.
	Out io.Writer
	// CSV, when not nil, receives the per-second figures as CSV
	// (PerfTest's --output-file).
	CSV io.Writer
}

func (cfg *benchConfig) validate() error {
	switch {
	case cfg.Client != "" && cfg.Client != benchClientRaw && cfg.Client != benchClientAMQP091:
		return fmt.Errorf("--client %q: want %s or %s", cfg.Client, benchClientRaw, benchClientAMQP091)
	case cfg.ConnectOnly < 0:
		return fmt.Errorf("--connect-only %d: want >= 0", cfg.ConnectOnly)
	case cfg.ConnectOnly > 0:
		return nil
	case cfg.PublishURI != "" && cfg.Connections != 0:
		return errors.New("a publish URI needs a connection per producer and consumer (--connections 0)")
	case cfg.Producers < 0 || cfg.Consumers < 0:
		return errors.New("--producers and --consumers must be >= 0")
	case cfg.Producers == 0 && cfg.Consumers == 0:
		return errors.New("nothing to do: no producers and no consumers")
	case cfg.Size < benchMinSize:
		return fmt.Errorf("--size %d: want at least %d (timestamp and sequence)", cfg.Size, benchMinSize)
	case cfg.Confirm < 0 || cfg.MultiAck < 0 || cfg.Prefetch < 0 || cfg.Rate < 0 || cfg.PMessages < 0 || cfg.Connections < 0 || cfg.TopicBindings < 0:
		return errors.New("--confirm, --multi-ack, --prefetch, --rate, --pmessages, --connections and --topic-bindings must be >= 0")
	case cfg.Prefetch > 65535:
		return fmt.Errorf("--prefetch %d: the protocol allows at most 65535", cfg.Prefetch)
	case cfg.MultiAck > 0 && cfg.AutoAck:
		return errors.New("--multi-ack has no effect with --autoack")
	case cfg.MultiAck > 0 && cfg.Prefetch > 0 && cfg.MultiAck > cfg.Prefetch:
		return fmt.Errorf("--multi-ack %d above --prefetch %d would stall the consumers", cfg.MultiAck, cfg.Prefetch)
	}
	return nil
}

// workerURI is the URI of connection i when every worker has its own
// (producers first): PublishURI for a producer when it is set.
func (cfg *benchConfig) workerURI(i int) string {
	if cfg.PublishURI != "" && i < cfg.Producers {
		return cfg.PublishURI
	}
	return cfg.URI
}

// benchResult is what a run measured.
type benchResult struct {
	Sent, Received    uint64
	Confirmed, Nacked uint64
	SendRate          float64 // msgs/s over the producers' running time
	ReceiveRate       float64 // deliveries/s from start to the last delivery
	Min, Max          time.Duration
	P50, P95, P99     time.Duration
	P999              time.Duration
	Duration          time.Duration // of the load phase
	Connect           time.Duration // to open every connection and channel
	Connections       int
	Failures          uint64
	QueueDepth        int64  // ready messages once the broker took in what was sent; -1 unknown
	Samples           uint64 // latencies recorded
	// Publish-to-confirm latencies, with ConfirmSamples recorded.
	ConfirmMin, ConfirmMax                          time.Duration
	ConfirmP50, ConfirmP95, ConfirmP99, ConfirmP999 time.Duration
	ConfirmSamples                                  uint64
	FirstFailure                                    error // the first of Failures, if any
}

// benchProducer and benchConsumer are owned by their goroutine; the atomics
// are read by the reporter. Padding keeps workers off each other's cache
// lines.
type benchProducer struct {
	sent, confirmed, nacked atomic.Uint64
	_                       [40]byte
	ch                      *amqp.Channel // --client amqp091
	raw                     *rawChannel   // --client raw
	rawMsg                  []byte        // the frames of one publish (raw)
	rawBody                 int           // where the body starts in rawMsg
	route                   benchRoute
	confirmHist             latencyHist // publish-to-confirm latencies
}

type benchConsumer struct {
	received atomic.Uint64
	last     atomic.Int64 // UnixNano of the latest delivery
	_        [48]byte
	ch       *amqp.Channel // --client amqp091
	raw      *rawChannel   // --client raw
	queue    string
	hist     latencyHist
}

// benchClient runs the producers and consumers of a benchRun on the
// connections of one client library.
type benchClient interface {
	// open dials the connections and opens a channel per producer and
	// consumer, set up (confirm mode, qos) and added to the run, not yet
	// running. It returns the number of connections opened, to be closed
	// by close even on error.
	open() (int, error)
	// consume starts the consumers, with what runs them in wg.
	consume(wg *sync.WaitGroup) error
	// produce runs one producer until the run stops or it is done.
	produce(p *benchProducer)
	// abort fails the sockets under producers stuck in a write.
	abort()
	// barrier returns once the broker has handled every publish sent (a
	// synchronous round trip on each producer channel), or after
	// benchBarrierTimeout.
	barrier()
	// stopConsumers ends the consumers and waits for wg.
	stopConsumers(wg *sync.WaitGroup)
	// close closes every connection.
	close()
}

// benchRun holds the state shared by one run's goroutines.
type benchRun struct {
	cfg       *benchConfig
	topo      *benchTopology
	producers []*benchProducer
	consumers []*benchConsumer
	start     time.Time

	stopProducers chan struct{} // closed to stop producing
	stopping      atomic.Bool   // set with stopProducers; checked per publish
	consumersDone atomic.Bool   // set before consumer channels are closed
	forced        atomic.Bool   // connections were closed under blocked producers
	producing     atomic.Int64  // producers still running
	producedEnd   atomic.Int64  // UnixNano when the last producer returned
	failures      atomic.Uint64
	errMu         sync.Mutex
	firstErr      error // first runtime failure, for the summary
}

func (r *benchRun) fail(err error) {
	r.failures.Add(1)
	r.errMu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.errMu.Unlock()
}

func (r *benchRun) producerDone() {
	if r.producing.Add(-1) == 0 {
		r.producedEnd.Store(time.Now().UnixNano())
	}
}

func benchDial(uri, name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	return amqp.DialConfig(uri, amqp.Config{Properties: props, Locale: "en_US"})
}

// runBench runs the load described by cfg until its duration or message
// count is reached or ctx is cancelled, and returns what it measured. It
// prints one line per second to cfg.Out.
func runBench(ctx context.Context, cfg benchConfig) (benchResult, error) {
	if err := cfg.validate(); err != nil {
		return benchResult{}, err
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.ConnectOnly > 0 {
		return runConnectOnly(ctx, &cfg)
	}
	topo, err := planTopology(&cfg)
	if err != nil {
		return benchResult{}, err
	}
	r := &benchRun{cfg: &cfg, topo: topo, stopProducers: make(chan struct{})}

	admin, err := benchDial(cfg.URI, "warren-bench-admin")
	if err != nil {
		return benchResult{}, fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = admin.Close() }()
	defer topo.teardown(admin, &cfg)
	if err := topo.declare(admin, &cfg); err != nil {
		return benchResult{}, err
	}

	var cl benchClient = &rawClient{r: r}
	if cfg.Client == benchClientAMQP091 {
		cl = &amqp091Client{r: r}
	}
	connStart := time.Now()
	nconns, err := cl.open()
	defer cl.close()
	if err != nil {
		return benchResult{}, err
	}
	res := benchResult{Connect: time.Since(connStart), Connections: nconns + 1, QueueDepth: -1}

	var consumersWG, producersWG sync.WaitGroup
	r.start = time.Now()
	if err := cl.consume(&consumersWG); err != nil {
		cl.stopConsumers(&consumersWG)
		return benchResult{}, err
	}
	r.producing.Store(int64(len(r.producers)))
	for _, p := range r.producers {
		producersWG.Go(func() { cl.produce(p) })
	}
	rep := newBenchReporter(r)
	reporterDone := make(chan struct{})
	stopReporter := make(chan struct{})
	go func() { defer close(reporterDone); rep.loop(stopReporter) }()

	r.wait(ctx)
	r.stopping.Store(true)
	close(r.stopProducers)
	if !waitGroupTimeout(&producersWG, benchStopGrace) {
		// A publish is stuck on a broker that stopped reading (flow control,
		// an alarm): fail the sockets so the producers return.
		r.fail(fmt.Errorf("producers still blocked %v after the stop; connections closed", benchStopGrace))
		r.forced.Store(true)
		cl.abort()
		producersWG.Wait()
	}
	end := time.Now()
	if len(r.producers) > 0 {
		// Publishes are asynchronous: the last ones may still be in
		// flight. The depth is read once the broker has them.
		if !r.forced.Load() {
			cl.barrier()
		}
		res.QueueDepth = topo.depth(admin)
	}
	cl.stopConsumers(&consumersWG)
	close(stopReporter)
	<-reporterDone
	rep.flush()

	for _, p := range r.producers {
		res.Sent += p.sent.Load()
		res.Confirmed += p.confirmed.Load()
		res.Nacked += p.nacked.Load()
	}
	var lastRecv int64
	for _, c := range r.consumers {
		res.Received += c.received.Load()
		lastRecv = max(lastRecv, c.last.Load())
	}
	res.Duration = end.Sub(r.start)
	if pe := r.producedEnd.Load(); pe > 0 {
		if d := time.Duration(pe - r.start.UnixNano()); d > 0 {
			res.SendRate = float64(res.Sent) / d.Seconds()
		}
	}
	if d := time.Duration(lastRecv - r.start.UnixNano()); lastRecv > 0 && d > 0 {
		res.ReceiveRate = float64(res.Received) / d.Seconds()
	}
	h := &rep.total
	res.Samples = h.n
	res.Min, res.Max = h.min(), h.max()
	res.P50, res.P95, res.P99, res.P999 = h.quantile(0.50), h.quantile(0.95), h.quantile(0.99), h.quantile(0.999)
	ch := &rep.confirmTotal
	res.ConfirmSamples = ch.n
	res.ConfirmMin, res.ConfirmMax = ch.min(), ch.max()
	res.ConfirmP50, res.ConfirmP95, res.ConfirmP99, res.ConfirmP999 = ch.quantile(0.50), ch.quantile(0.95), ch.quantile(0.99), ch.quantile(0.999)
	res.Failures = r.failures.Load()
	r.errMu.Lock()
	res.FirstFailure = r.firstErr
	r.errMu.Unlock()
	return res, nil
}

// amqp091Client is --client amqp091: producers and consumers on
// github.com/rabbitmq/amqp091-go.
type amqp091Client struct {
	r     *benchRun
	conns []*amqp.Connection
}

func (ac *amqp091Client) open() (int, error) {
	r, cfg := ac.r, ac.r.cfg
	workers := cfg.Producers + cfg.Consumers
	n := cfg.Connections
	if n == 0 || n > workers {
		n = workers
	}
	for i := range n {
		c, err := benchDial(cfg.workerURI(i), fmt.Sprintf("warren-bench-%d", i))
		if err != nil {
			return len(ac.conns), fmt.Errorf("connect: %w", err)
		}
		ac.conns = append(ac.conns, c)
	}
	conns := ac.conns
	for w := range workers {
		ch, err := conns[w%n].Channel()
		if err != nil {
			return n, fmt.Errorf("open channel: %w", err)
		}
		if w < cfg.Producers {
			p := &benchProducer{ch: ch, route: r.topo.routes[w]}
			if cfg.Confirm > 0 {
				if err := ch.Confirm(false); err != nil {
					return n, fmt.Errorf("confirm.select: %w", err)
				}
			}
			r.producers = append(r.producers, p)
			continue
		}
		if cfg.Prefetch > 0 {
			if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
				return n, fmt.Errorf("basic.qos: %w", err)
			}
		}
		q := r.topo.queues[(w-cfg.Producers)%len(r.topo.queues)]
		r.consumers = append(r.consumers, &benchConsumer{ch: ch, queue: q})
	}
	return n, nil
}

func (ac *amqp091Client) consume(wg *sync.WaitGroup) error {
	for _, c := range ac.r.consumers {
		deliveries, err := c.ch.Consume(c.queue, "", ac.r.cfg.AutoAck, false, false, false, ac.r.cfg.ConsumerArgs)
		if err != nil {
			return fmt.Errorf("consume %q: %w", c.queue, err)
		}
		wg.Go(func() { ac.r.consume(c, deliveries) })
	}
	return nil
}

func (ac *amqp091Client) produce(p *benchProducer) { ac.r.produce(p) }

func (ac *amqp091Client) barrier() {
	var wg sync.WaitGroup
	for _, p := range ac.r.producers {
		if p.ch != nil && !p.ch.IsClosed() {
			// basic.qos is harmless on a channel that does not consume.
			wg.Go(func() { _ = p.ch.Qos(0, 0, false) })
		}
	}
	waitGroupTimeout(&wg, benchBarrierTimeout)
}

func (ac *amqp091Client) abort() {
	for _, c := range ac.conns {
		_ = c.CloseDeadline(time.Now())
	}
}

func (ac *amqp091Client) close() {
	for _, c := range ac.conns {
		_ = c.Close()
	}
}

// wait returns when the run is over: ctx is done, the duration has passed,
// or (with --pmessages) the producers are done and the consumers have
// received what they will.
func (r *benchRun) wait(ctx context.Context) {
	var deadline <-chan time.Time
	if r.cfg.Duration > 0 {
		t := time.NewTimer(r.cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	if r.cfg.PMessages == 0 {
		select {
		case <-ctx.Done():
		case <-deadline:
		}
		return
	}
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	const idle = time.Second // no delivery for this long after the producers finish: done
	var lastCount uint64
	lastChange := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			return
		case <-poll.C:
		}
		if r.producing.Load() > 0 {
			continue
		}
		if len(r.consumers) == 0 {
			return
		}
		var got uint64
		for _, c := range r.consumers {
			got += c.received.Load()
		}
		if want, known := r.expected(); known && got >= want {
			return
		}
		if got != lastCount {
			lastCount, lastChange = got, time.Now()
		} else if time.Since(lastChange) > idle {
			return
		}
	}
}

// expected returns how many deliveries the consumers should receive for
// what has been sent, when the topology is known.
func (r *benchRun) expected() (uint64, bool) {
	consumed := make(map[string]bool, len(r.consumers))
	for _, c := range r.consumers {
		consumed[c.queue] = true
	}
	var n uint64
	for _, p := range r.producers {
		if p.route.dests == nil {
			return 0, false
		}
		copies := 0
		for _, q := range p.route.dests {
			if consumed[r.topo.queues[q]] {
				copies++
			}
		}
		n += p.sent.Load() * uint64(copies)
	}
	return n, true
}

// stopConsumers closes the consumers' channels, which ends their delivery
// loops, and waits for them.
func (ac *amqp091Client) stopConsumers(wg *sync.WaitGroup) {
	ac.r.consumersDone.Store(true)
	for _, c := range ac.r.consumers {
		if c.ch != nil {
			_ = c.ch.Close()
		}
	}
	wg.Wait()
}

// produce publishes from one reused body until stopped or PMessages are
// sent. The first 16 bytes are rewritten in place for each message.
func (r *benchRun) produce(p *benchProducer) {
	cfg := r.cfg
	defer r.producerDone()
	body := make([]byte, cfg.Size)
	msg := amqp.Publishing{Body: body, Headers: p.route.headers, DeliveryMode: amqp.Transient}
	if cfg.Persistent {
		msg.DeliveryMode = amqp.Persistent
	}
	var confirms chan amqp.Confirmation
	if cfg.Confirm > 0 {
		confirms = p.ch.NotifyPublish(make(chan amqp.Confirmation, cfg.Confirm+1))
	}
	outstanding := 0
	// sentAt holds the send time of each unconfirmed publish by delivery
	// tag (seq+1); at most Confirm are outstanding.
	var sentAt []int64
	if confirms != nil {
		sentAt = make([]int64, cfg.Confirm+1)
	}
	settle := func(c amqp.Confirmation) {
		outstanding--
		p.confirmHist.record(time.Now().UnixNano() - sentAt[c.DeliveryTag%uint64(len(sentAt))])
		if c.Ack {
			p.confirmed.Add(1)
		} else {
			p.nacked.Add(1)
		}
	}
	var pace *time.Timer
	if cfg.Rate > 0 {
		pace = time.NewTimer(time.Hour)
		defer pace.Stop()
	}
	start := time.Now()
	var seq uint64
	for !r.stopping.Load() && (cfg.PMessages == 0 || seq < uint64(cfg.PMessages)) {
		if pace != nil {
			due := start.Add(time.Duration(float64(seq) * float64(time.Second) / cfg.Rate))
			if d := time.Until(due); d > 0 {
				pace.Reset(d)
				select {
				case <-pace.C:
				case <-r.stopProducers:
					continue
				}
			}
		}
		for confirms != nil && outstanding >= cfg.Confirm {
			select {
			case c, ok := <-confirms:
				if !ok {
					r.fail(errors.New("producer: channel closed while awaiting confirms"))
					return
				}
				settle(c)
			case <-r.stopProducers:
			}
			if r.stopping.Load() {
				break
			}
		}
		if r.stopping.Load() {
			break
		}
		now := time.Now().UnixNano()
		binary.BigEndian.PutUint64(body[0:8], uint64(now))
		binary.BigEndian.PutUint64(body[8:16], seq)
		if sentAt != nil {
			sentAt[(seq+1)%uint64(len(sentAt))] = now
		}
		if err := p.ch.Publish(r.topo.exchange, p.route.key, false, false, msg); err != nil {
			if !r.forced.Load() {
				r.fail(fmt.Errorf("publish: %w", err))
			}
			return
		}
		seq++
		outstanding++
		p.sent.Add(1)
	}
	// Collect the confirms still outstanding, for a bounded time.
	if confirms == nil || outstanding == 0 {
		return
	}
	grace := time.NewTimer(5 * time.Second)
	defer grace.Stop()
	for outstanding > 0 {
		select {
		case c, ok := <-confirms:
			if !ok {
				return
			}
			settle(c)
		case <-grace.C:
			return
		}
	}
}

// consume records the latency of each delivery from the timestamp in its
// body and acknowledges as configured, until its channel is closed.
func (r *benchRun) consume(c *benchConsumer, deliveries <-chan amqp.Delivery) {
	cfg := r.cfg
	var unacked int
	for d := range deliveries {
		now := time.Now().UnixNano()
		if len(d.Body) >= benchMinSize {
			c.hist.record(now - int64(binary.BigEndian.Uint64(d.Body)))
		}
		c.last.Store(now)
		c.received.Add(1)
		if cfg.AutoAck {
			continue
		}
		if cfg.MultiAck > 1 {
			if unacked++; unacked < cfg.MultiAck {
				continue
			}
			unacked = 0
			_ = d.Ack(true)
			continue
		}
		_ = d.Ack(false)
	}
	if !r.consumersDone.Load() {
		r.fail(fmt.Errorf("consumer of %q: channel closed by the broker", c.queue))
	}
}
