package exchange

import (
	"cmp"
	"errors"
	"slices"
	"strconv"

	"github.com/warrenmq/warren/amqp"
)

// Hash exchanges: x-consistent-hash (RabbitMQ's consistent-hash exchange plugin) and
// x-modulus-hash (RabbitMQ 4.3). Both pick one destination per message from a hash of a
// string (the routing key, unless the broker hands Route another value: the
// consistent-hash exchange's hash-header or hash-property) and route it there only.
//
//   - x-consistent-hash: each binding's key is its weight, a positive integer: the binding
//     owns that many buckets. A message goes to the destination of bucket
//     jump(hash(key), total buckets), Lamping and Veach's jump consistent hash, as in the
//     plugin; so each destination's share of keys is its weight's share of the total, and
//     adding a binding moves only the keys that the new buckets take.
//   - x-modulus-hash: binding keys are ignored; a message goes to destination
//     hash(key) mod N of the N bindings.
//
// hash is FNV-1a (64-bit) of the key's bytes. Buckets and bindings are ordered by
// destination (kind, name) and binding key, not by the order the bindings were made, so
// the same bindings route the same key to the same destination on every node and after
// a restart.

// MaxHashWeight bounds the weight (bucket count) of one consistent-hash binding, and
// MaxHashBuckets the buckets of one exchange: they are held in memory.
const (
	MaxHashWeight  = 1 << 16
	MaxHashBuckets = 1 << 20
)

// ErrHashWeight is returned by ValidateHashWeight for a binding key that is not a weight.
var ErrHashWeight = errors.New("exchange: the binding key of a consistent-hash exchange must be an integer weight from 1 to 65536")

// ValidateHashWeight checks the binding key of a consistent-hash binding.
func ValidateHashWeight(key string) error {
	if _, ok := hashWeight(key); !ok {
		return ErrHashWeight
	}
	return nil
}

func hashWeight(key string) (int, bool) {
	w, err := strconv.Atoi(key)
	if err != nil || w < 1 || w > MaxHashWeight {
		return 0, false
	}
	return w, true
}

// hashIndex routes by a hash of the key; consistent selects the consistent-hash
// buckets, else modulus.
type hashIndex struct {
	consistent bool
	entries    []*bindingEntry // sorted by destination and key
	// buckets are the destinations by bucket (consistent) or binding (modulus).
	buckets []Destination
}

func (x *hashIndex) add(e *bindingEntry) {
	i, _ := slices.BinarySearchFunc(x.entries, e, compareEntries)
	x.entries = slices.Insert(x.entries, i, e)
	x.rebuild()
}

func (x *hashIndex) remove(e *bindingEntry) {
	if i := slices.Index(x.entries, e); i >= 0 {
		x.entries = slices.Delete(x.entries, i, i+1)
		x.rebuild()
	}
}

func compareEntries(a, b *bindingEntry) int {
	return cmp.Or(
		cmp.Compare(a.b.Destination.Kind, b.b.Destination.Kind),
		cmp.Compare(a.b.Destination.Name, b.b.Destination.Name),
		cmp.Compare(a.b.Key, b.b.Key),
		cmp.Compare(a.seq, b.seq))
}

// rebuild lays out the buckets again after a change of bindings (rare: O(buckets)).
func (x *hashIndex) rebuild() {
	x.buckets = x.buckets[:0]
	for _, e := range x.entries {
		n := 1
		if x.consistent {
			w, ok := hashWeight(e.b.Key)
			if !ok {
				continue // refused at bind; never routed to
			}
			n = min(w, MaxHashBuckets-len(x.buckets))
		}
		for range n {
			x.buckets = append(x.buckets, e.b.Destination)
		}
	}
}

func (x *hashIndex) route(key string, _ amqp.Table, out []Destination) []Destination {
	n := len(x.buckets)
	if n == 0 {
		return out
	}
	h := hashKey(key)
	if x.consistent {
		return append(out, x.buckets[jumpHash(h, n)])
	}
	return append(out, x.buckets[h%uint64(n)])
}

// hashKey is FNV-1a, 64-bit, of s.
func hashKey(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// jumpHash is the jump consistent hash of key over n buckets (Lamping and Veach, 2014).
func jumpHash(key uint64, n int) int {
	b, j := int64(-1), int64(0)
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}
