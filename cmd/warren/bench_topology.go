package main

import (
	"fmt"
	"math/rand/v2"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// benchHeaderKey is the header a headers-exchange run routes on.
const benchHeaderKey = "warren-bench-queue"

// benchRoute is where one producer publishes.
type benchRoute struct {
	key     string
	headers amqp.Table
	// dests are the queues (indexes) each message reaches, or nil when the
	// topology was not declared by us and so is unknown.
	dests []int
}

// benchTopology names the exchange, queues and routes of a run, and declares
// and removes them unless the run is --predeclared.
type benchTopology struct {
	exchange string // "" is the default exchange
	declareX bool   // we declare (and delete) the exchange
	queues   []string
	routes   []benchRoute // one per producer
	durable  bool
	autoDel  bool
	// createdX and createdQ record what declare created, the only things
	// teardown deletes: a queue or exchange that was there before the run
	// is the user's, and a bench never deletes or purges it.
	createdX bool
	createdQ []bool
}

func planTopology(cfg *benchConfig) (*benchTopology, error) {
	t := &benchTopology{}
	switch cfg.ExchangeType {
	case amqp.ExchangeDirect, amqp.ExchangeFanout, amqp.ExchangeTopic, amqp.ExchangeHeaders:
	default:
		return nil, fmt.Errorf("exchange type %q: want direct, fanout, topic or headers", cfg.ExchangeType)
	}
	switch {
	case cfg.Exchange == "":
		t.exchange = "warren-bench-" + cfg.ExchangeType
		t.declareX = !cfg.Predeclared
	case cfg.Exchange == "amq.default":
		t.exchange = ""
	default:
		t.exchange = cfg.Exchange
		t.declareX = !cfg.Predeclared && !strings.HasPrefix(cfg.Exchange, "amq.")
	}
	if cfg.Queues < 1 {
		return nil, fmt.Errorf("--queues %d: want at least 1", cfg.Queues)
	}
	if cfg.Queues > 1 && !strings.Contains(cfg.QueuePattern, "%d") {
		return nil, fmt.Errorf("--queue-pattern %q: needs %%d for %d queues", cfg.QueuePattern, cfg.Queues)
	}
	for i := range cfg.Queues {
		name := cfg.QueuePattern
		if strings.Contains(name, "%d") {
			name = fmt.Sprintf(name, i)
		}
		t.queues = append(t.queues, name)
	}
	qtype, _ := cfg.QueueArgs["x-queue-type"].(string)
	replicated := qtype == "quorum" || qtype == "stream"
	t.durable = cfg.Persistent || replicated
	t.autoDel = cfg.AutoDelete && !replicated

	all := make([]int, len(t.queues))
	for i := range all {
		all[i] = i
	}
	for p := range cfg.Producers {
		q := p % len(t.queues)
		r := benchRoute{dests: []int{q}}
		switch {
		case t.exchange == "":
			r.key = t.queues[q]
			if cfg.RoutingKey != "" {
				r.key, r.dests = cfg.RoutingKey, nil
			}
		case cfg.ExchangeType == amqp.ExchangeHeaders:
			r.headers = amqp.Table{benchHeaderKey: t.queues[q]}
			r.key = cfg.RoutingKey
		case cfg.ExchangeType == amqp.ExchangeFanout:
			r.key, r.dests = cfg.RoutingKey, all
		case cfg.RoutingKey != "":
			r.key, r.dests = cfg.RoutingKey, all // every queue is bound with it
		case cfg.ExchangeType == amqp.ExchangeTopic:
			r.key = "bench." + t.queues[q] + ".m"
		default:
			r.key = t.queues[q]
		}
		if cfg.Predeclared {
			r.dests = nil
		}
		t.routes = append(t.routes, r)
	}
	return t, nil
}

// binding returns the key and arguments that bind queue i to the exchange.
func (t *benchTopology) binding(cfg *benchConfig, i int) (string, amqp.Table) {
	switch {
	case cfg.ExchangeType == amqp.ExchangeHeaders:
		return "", amqp.Table{"x-match": "all", benchHeaderKey: t.queues[i]}
	case cfg.RoutingKey != "":
		return cfg.RoutingKey, nil
	case cfg.ExchangeType == amqp.ExchangeTopic:
		return "bench." + t.queues[i] + ".#", nil
	case cfg.ExchangeType == amqp.ExchangeFanout:
		return "", nil
	}
	return t.queues[i], nil
}

// extraTopicBinding returns the j-th decoy binding key: random words that no
// publish of this run matches, in shapes that make a topic router look at
// more than one branch ("bench" prefix, leading "*", trailing "#").
func extraTopicBinding(j int) string {
	w := fmt.Sprintf("r%08x", rand.Uint32())
	switch j % 3 {
	case 0:
		return "bench." + w + ".*"
	case 1:
		return "*." + w + ".#"
	}
	return w + ".#"
}

// declare creates the exchange, queues and bindings on conn, noting which
// of the exchange and queues did not exist before.
func (t *benchTopology) declare(conn *amqp.Connection, cfg *benchConfig) error {
	if cfg.Predeclared {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if t.declareX {
		existed := exists(conn, func(pc *amqp.Channel) error {
			return pc.ExchangeDeclarePassive(t.exchange, cfg.ExchangeType, false, false, false, false, nil)
		})
		if err := ch.ExchangeDeclare(t.exchange, cfg.ExchangeType, false, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %q: %w", t.exchange, err)
		}
		t.createdX = !existed
	}
	t.createdQ = make([]bool, len(t.queues))
	for i, q := range t.queues {
		existed := exists(conn, func(pc *amqp.Channel) error {
			_, err := pc.QueueDeclarePassive(q, t.durable, t.autoDel, false, false, nil)
			return err
		})
		if _, err := ch.QueueDeclare(q, t.durable, t.autoDel, false, false, cfg.QueueArgs); err != nil {
			return fmt.Errorf("declare queue %q: %w", q, err)
		}
		t.createdQ[i] = !existed
		if t.exchange == "" {
			continue
		}
		key, args := t.binding(cfg, i)
		if err := ch.QueueBind(q, key, t.exchange, false, args); err != nil {
			return fmt.Errorf("bind queue %q: %w", q, err)
		}
		if cfg.ExchangeType != amqp.ExchangeTopic {
			continue
		}
		for j := range cfg.TopicBindings {
			if err := ch.QueueBind(q, extraTopicBinding(j), t.exchange, false, nil); err != nil {
				return fmt.Errorf("bind queue %q: %w", q, err)
			}
		}
	}
	return nil
}

// exists runs a passive declare on a channel of its own (a missing entity
// closes it) and reports whether it succeeded.
func exists(conn *amqp.Connection, passive func(*amqp.Channel) error) bool {
	ch, err := conn.Channel()
	if err != nil {
		return false
	}
	if err := passive(ch); err != nil {
		return false
	}
	_ = ch.Close()
	return true
}

// depth returns the number of ready messages summed over the run's queues,
// from passive declares on conn; -1 if any of them failed.
func (t *benchTopology) depth(conn *amqp.Connection) int64 {
	ch, err := conn.Channel()
	if err != nil {
		return -1
	}
	defer func() { _ = ch.Close() }()
	var n int64
	for _, q := range t.queues {
		st, err := ch.QueueDeclarePassive(q, t.durable, t.autoDel, false, false, nil)
		if err != nil {
			return -1
		}
		n += int64(st.Messages)
	}
	return n
}

// teardown deletes what declare created, and nothing that existed before
// the run. Errors are ignored: an auto-delete queue may already be gone,
// and a failed delete closes only its channel.
func (t *benchTopology) teardown(conn *amqp.Connection, cfg *benchConfig) {
	if cfg.Predeclared {
		return
	}
	var ch *amqp.Channel
	del := func(f func(*amqp.Channel) error) {
		if ch == nil || ch.IsClosed() {
			var err error
			if ch, err = conn.Channel(); err != nil {
				ch = nil
				return
			}
		}
		_ = f(ch)
	}
	for i, q := range t.queues {
		if i < len(t.createdQ) && t.createdQ[i] {
			del(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
		}
	}
	if t.createdX {
		del(func(ch *amqp.Channel) error { return ch.ExchangeDelete(t.exchange, false, false) })
	}
	if ch != nil {
		_ = ch.Close()
	}
}
