package broker

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/exchange"
)

// Super streams: a partitioned stream laid out as RabbitMQ lays it out (and
// as its stream clients expect): a durable direct exchange <name> with the
// argument x-super-stream=true, and partition streams <name>-<key> bound to
// it with routing key <key> and binding argument x-stream-partition-order.
//
// AMQP 0-9-1 publishers cannot compute a partition themselves the way
// stream clients do, so an exchange declared with
// x-super-stream-routing=hash routes on the hash of the routing key
// instead: Murmur3 (32-bit, seed 104729, the stream clients' hash) modulo
// the number of partitions, in partition order.

// SuperStreamSpec describes a super stream to create: Partitions streams
// named <Name>-0..<Name>-(Partitions-1) with keys "0".."N-1", or one per
// BindingKeys entry named <Name>-<key>. Arguments are the partitions'
// queue arguments (x-max-length-bytes, x-max-age...).
type SuperStreamSpec struct {
	Name        string
	Partitions  int
	BindingKeys []string
	Arguments   amqp.Table
	// HashRouting sets x-super-stream-routing=hash on the exchange.
	HashRouting bool
}

// ErrInvalid is returned for a super stream request that makes no sense.
var ErrInvalid = errors.New("broker: invalid request")

// maxPartitions bounds a super stream's partitions.
const maxPartitions = 1024

// AddSuperStream creates a super stream: its exchange, partition streams and
// bindings, as rabbitmq-streams add_super_stream does. Existing equivalent
// parts are kept (it may be run again).
func (b *Broker) AddSuperStream(vhostName, username string, sp SuperStreamSpec) error {
	keys := sp.BindingKeys
	switch {
	case sp.Name == "":
		return fmt.Errorf("%w: super stream name must not be empty", ErrInvalid)
	case sp.Partitions > 0 && len(keys) > 0:
		return fmt.Errorf("%w: give either partitions or binding keys, not both", ErrInvalid)
	case sp.Partitions > maxPartitions || len(keys) > maxPartitions:
		return fmt.Errorf("%w: at most %d partitions", ErrInvalid, maxPartitions)
	case sp.Partitions > 0:
		keys = make([]string, sp.Partitions)
		for i := range keys {
			keys[i] = strconv.Itoa(i)
		}
	case len(keys) == 0:
		return fmt.Errorf("%w: a super stream needs partitions or binding keys", ErrInvalid)
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if k == "" || seen[k] {
			return fmt.Errorf("%w: binding keys must be distinct and not empty", ErrInvalid)
		}
		seen[k] = true
	}
	xargs := amqp.Table{"x-super-stream": true}
	if sp.HashRouting {
		xargs["x-super-stream-routing"] = "hash"
	}
	if err := b.DeclareExchange(vhostName, username, ExchangeSpec{Name: sp.Name, Type: "direct", Durable: true, Arguments: xargs}); err != nil {
		return err
	}
	for i, k := range keys {
		qargs := amqp.Table{}
		for a, v := range sp.Arguments {
			qargs[a] = v
		}
		qargs["x-queue-type"] = "stream"
		if _, ok := qargs["x-queue-leader-locator"]; !ok && b.replicated() {
			// Partitions spread over the data groups, so their leaders
			// over the nodes.
			qargs["x-queue-leader-locator"] = "balanced"
		}
		q := sp.Name + "-" + k
		if err := b.DeclareQueue(vhostName, username, QueueSpec{Name: q, Durable: true, Arguments: qargs}); err != nil {
			return err
		}
		if err := b.Bind(vhostName, username, sp.Name, q, false, k, amqp.Table{"x-stream-partition-order": int64(i)}, true); err != nil {
			return err
		}
	}
	return nil
}

// DeleteSuperStream deletes a super stream's partition streams and its
// exchange.
func (b *Broker) DeleteSuperStream(vhostName, username, name string) error {
	parts, err := b.SuperStreamPartitions(vhostName, name)
	if err != nil {
		return err
	}
	for _, q := range parts {
		if _, err := b.DeleteQueue(vhostName, q, false, false); err != nil {
			return err
		}
	}
	return b.DeleteExchange(vhostName, username, name, false)
}

// SuperStreamPartitions lists the partition streams of super stream name in
// partition order.
func (b *Broker) SuperStreamPartitions(vhostName, name string) ([]string, error) {
	v := b.vhost(vhostName)
	if v == nil {
		return nil, fmt.Errorf("vhost %q: %w", vhostName, ErrNotFound)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	ex := v.exchanges[name]
	if ex == nil || ex.args["x-super-stream"] != true {
		return nil, fmt.Errorf("super stream %q in vhost %q: %w", name, vhostName, ErrNotFound)
	}
	var out []string
	for _, p := range partitionsOf(ex) {
		out = append(out, p.queue)
	}
	return out, nil
}

type partition struct {
	order      int64
	key, queue string
}

// partitionsOf lists ex's bindings to queues that carry
// x-stream-partition-order, in that order. Hold v.mu.
func partitionsOf(ex *exchangeEntity) []partition {
	var ps []partition
	for _, bd := range ex.router.Bindings() {
		if bd.Destination.Kind != exchange.DestQueue {
			continue
		}
		o, ok := argInt(bd.Args["x-stream-partition-order"])
		if !ok {
			continue
		}
		ps = append(ps, partition{order: o, key: bd.Key, queue: bd.Destination.Name})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].order < ps[j].order })
	return ps
}

// superStreamKey is the routing key a message with key is routed on by ex:
// for a super stream exchange with x-super-stream-routing=hash, the binding
// key of partition murmur3(key) mod N. Hold v.mu (read).
func superStreamKey(ex *exchangeEntity, key string) string {
	if ex.args["x-super-stream-routing"] != "hash" {
		return key
	}
	keys := ex.partitionKeys.Load()
	if keys == nil {
		ps := partitionsOf(ex)
		ks := make([]string, len(ps))
		for i, p := range ps {
			ks[i] = p.key
		}
		keys = &ks
		ex.partitionKeys.Store(keys)
	}
	if len(*keys) == 0 {
		return key
	}
	return (*keys)[murmur3([]byte(key), 104729)%uint32(len(*keys))]
}

// murmur3 is MurmurHash3's 32-bit variant (x86_32).
func murmur3(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(data)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= c1
		k = k<<15 | k>>17
		k *= c2
		h ^= k
		h = h<<13 | h>>19
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch n - i {
	case 3:
		k ^= uint32(data[i+2]) << 16
		fallthrough
	case 2:
		k ^= uint32(data[i+1]) << 8
		fallthrough
	case 1:
		k ^= uint32(data[i])
		k *= c1
		k = k<<15 | k>>17
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// partitionIndex is the position of stream queue name in the super stream
// it is a partition of (its x-stream-partition-order), 0 when it is none.
func (v *vhost) partitionIndex(name string) int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, ex := range v.exchanges {
		if ex.args["x-super-stream"] != true {
			continue
		}
		for i, p := range partitionsOf(ex) {
			if p.queue == name {
				return i
			}
		}
	}
	return 0
}
