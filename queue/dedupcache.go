package queue

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/warrenmq/warren/amqp"
)

// Deduplication keys and the cache that holds them, shared by queues
// (Dedup, msgdedup.go) and exchanges (broker/dedup.go).
//
// A key is not kept as the header's value but as DedupHash, the first 128
// bits of the SHA-256 of the value's canonical encoding (DedupKeyOf), so
// that a cache entry is fixed-size and a lookup allocates nothing. Two
// values share a hash with probability 2^-128 per pair: with a cache of
// 10^6 keys and 10^5 new keys a second, a false duplicate is expected once
// in ~10^20 years; SHA-256 also makes one infeasible to craft (a second
// preimage of 128 bits), so a publisher cannot have another's message
// dropped by choosing its key.

// DedupHash is a deduplication key: the first 128 bits of the SHA-256 of
// the canonical encoding of an x-deduplication-header value.
type DedupHash [16]byte

// The canonical encoding of a header value is a tag octet and bytes:
//
//	'S' content   a long string or byte array (the same key, as before)
//	'l' int64 BE  an integer of any width and sign
//	typ raw       any other type: its type octet and its encoding
const (
	dedupTagString = 'S'
	dedupTagInt    = 'l'
)

// hashDedup hashes tag and value.
func hashDedup(tag byte, value []byte) DedupHash {
	var buf [64]byte
	var sum [32]byte
	if len(value) < len(buf) {
		buf[0] = tag
		n := copy(buf[1:], value)
		sum = sha256.Sum256(buf[:1+n])
	} else {
		h := sha256.New()
		h.Write([]byte{tag})
		h.Write(value)
		h.Sum(sum[:0])
	}
	return DedupHash(sum[:16])
}

// headerInt is the integer a header value of type typ encoded as raw
// holds, and whether it is an integer.
func headerInt(typ byte, raw []byte) (int64, bool) {
	switch typ {
	case 'b':
		return int64(int8(raw[0])), true
	case 'B':
		return int64(raw[0]), true
	case 's':
		return int64(int16(binary.BigEndian.Uint16(raw))), true
	case 'u':
		return int64(binary.BigEndian.Uint16(raw)), true
	case 'I':
		return int64(int32(binary.BigEndian.Uint32(raw))), true
	case 'i':
		return int64(binary.BigEndian.Uint32(raw)), true
	case 'l':
		return int64(binary.BigEndian.Uint64(raw)), true
	}
	return 0, false
}

// DedupKeyOf is the deduplication key of a message with header (a content
// header frame's payload), from its x-deduplication-header value, and
// whether it has one; and the window its x-cache-ttl header asks for (-1:
// none). A string and a byte array with the same bytes are the same key,
// as are integers of the same value whatever their width; a string is
// never an integer's key. It reads the encoded headers table without
// decoding it and allocates nothing for a value under 63 bytes.
func DedupKeyOf(header []byte) (key DedupHash, ttl int64, ok bool) {
	if len(header) < 14 || header[12]&byte(amqp.FlagHeaders>>8) == 0 {
		return DedupHash{}, -1, false
	}
	typ, raw, ok := amqp.PeekHeader(header, DedupHeader)
	if !ok {
		return DedupHash{}, -1, false
	}
	switch typ {
	case 'S', 'x':
		key = hashDedup(dedupTagString, raw)
	default:
		if n, isInt := headerInt(typ, raw); isInt {
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(n))
			key = hashDedup(dedupTagInt, b[:])
		} else {
			key = hashDedup(typ, raw)
		}
	}
	ttl = -1
	if typ, raw, ok := amqp.PeekHeader(header, DedupTTLHeader); ok {
		if n, isInt := headerInt(typ, raw); isInt && n >= 0 {
			ttl = n
		}
	}
	return key, ttl, true
}

// DedupKeyOfLegacy is the key of what versions before DedupHash kept as a
// key: a string value as such, an integer as "int32:5" (its Go type and
// value), anything else in a form no new key matches (keys over 200 bytes
// were kept as their SHA-256, which no new key matches either: such a
// duplicate is let through once after an upgrade).
func DedupKeyOfLegacy(s string) DedupHash {
	if typ, v, ok := strings.Cut(s, ":"); ok {
		switch typ {
		case "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "int":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				var b [8]byte
				binary.BigEndian.PutUint64(b[:], uint64(n))
				return hashDedup(dedupTagInt, b[:])
			}
		}
	}
	return hashDedup(dedupTagString, []byte(s))
}

// DedupCache is a bounded cache of deduplication keys, oldest evicted
// first, without an allocation per entry: a ring of Size slots in
// insertion order, and an open-addressing index (linear probing) of the
// live ones by key. An entry holds a sequence number and an expiry for its
// owner's use. Removing an entry leaves a hole in the ring, reused when
// the ring's head reaches it (so a hole is no eviction). Not safe for
// concurrent use. The zero value with Size set is ready.
type DedupCache struct {
	Size int

	ring []dedupSlot // insertion order from head, at most Size
	head int
	live int
	// index holds, per bucket, 0 (empty) or the ring position + 1 in the
	// low 32 bits and the key's top 32 bits above, checked before the
	// ring is read. Its length is a power of two, at least twice live.
	index []uint64
}

// dedupSlot is an entry of the ring; hole marks one removed.
type dedupSlot struct {
	key     DedupHash
	seq     uint64
	expires int64
	hole    bool
}

// DedupEntry is what Find returns: a position in the cache, valid until
// the next change.
type DedupEntry struct {
	Seq     uint64
	Expires int64
	pos     int
}

func bucketOf(k DedupHash, mask int) int { return int(binary.LittleEndian.Uint64(k[8:])) & mask }

func tagOf(k DedupHash) uint64 { return uint64(binary.LittleEndian.Uint32(k[:])) << 32 }

// find returns the bucket of key in the index and whether it is there (if
// not, the empty bucket where it goes).
func (c *DedupCache) find(key DedupHash) (int, bool) {
	if len(c.index) == 0 {
		return -1, false
	}
	mask := len(c.index) - 1
	tag := tagOf(key)
	for b := bucketOf(key, mask); ; b = (b + 1) & mask {
		v := c.index[b]
		if v == 0 {
			return b, false
		}
		if v&^(1<<32-1) == tag && c.ring[int(uint32(v))-1].key == key {
			return b, true
		}
	}
}

// Find returns key's entry and whether it is cached.
func (c *DedupCache) Find(key DedupHash) (DedupEntry, bool) {
	b, ok := c.find(key)
	if !ok {
		return DedupEntry{}, false
	}
	pos := int(uint32(c.index[b])) - 1
	s := &c.ring[pos]
	return DedupEntry{Seq: s.seq, Expires: s.expires, pos: pos}, true
}

// Update sets the entry e, found by Find with no change since.
func (c *DedupCache) Update(e DedupEntry) {
	s := &c.ring[e.pos]
	s.seq, s.expires = e.Seq, e.Expires
}

// Remove forgets the entry e, found by Find with no change since.
func (c *DedupCache) Remove(e DedupEntry) {
	s := &c.ring[e.pos]
	b, _ := c.find(s.key)
	c.unindex(b)
	s.hole = true
	c.live--
}

// Insert adds key, not cached, with seq and expires; when the ring is
// full its oldest entry is evicted and returned (ok true).
func (c *DedupCache) Insert(key DedupHash, seq uint64, expires int64) (evicted DedupHash, ok bool) {
	if 2*(c.live+1) > len(c.index) {
		c.grow()
	}
	var pos int
	if len(c.ring) < c.Size {
		if len(c.ring) == cap(c.ring) {
			// Doubling up to Size, not append's steps of 1.25 for
			// large slices: filling copies about twice the ring's
			// final size in all, not five times.
			ring := make([]dedupSlot, len(c.ring), min(c.Size, max(64, 2*cap(c.ring))))
			copy(ring, c.ring)
			c.ring = ring
		}
		c.ring = append(c.ring, dedupSlot{})
		pos = len(c.ring) - 1
	} else {
		pos = c.head
		c.head++
		if c.head == len(c.ring) {
			c.head = 0
		}
		if s := &c.ring[pos]; !s.hole {
			evicted, ok = s.key, true
			b, _ := c.find(s.key)
			c.unindex(b)
			c.live--
		}
	}
	c.ring[pos] = dedupSlot{key: key, seq: seq, expires: expires}
	b, _ := c.find(key)
	c.index[b] = tagOf(key) | uint64(pos+1)
	c.live++
	return evicted, ok
}

// unindex empties bucket b, moving back the entries after it that probing
// would no longer reach (backward-shift deletion).
func (c *DedupCache) unindex(b int) {
	mask := len(c.index) - 1
	for {
		c.index[b] = 0
		next := b
		for {
			next = (next + 1) & mask
			v := c.index[next]
			if v == 0 {
				return
			}
			home := bucketOf(c.ring[int(uint32(v))-1].key, mask)
			// v may move to b unless its home lies cyclically in (b, next].
			if (next > b && (home <= b || home > next)) || (next < b && home <= b && home > next) {
				c.index[b] = v
				b = next
				break
			}
		}
	}
}

// grow doubles the index (from 64 buckets) and indexes the live entries
// again.
func (c *DedupCache) grow() {
	n := max(64, 2*len(c.index))
	for n < 2*(c.live+1) {
		n *= 2
	}
	c.index = make([]uint64, n)
	for pos := range c.ring {
		if s := &c.ring[pos]; !s.hole {
			b, _ := c.find(s.key)
			c.index[b] = tagOf(s.key) | uint64(pos+1)
		}
	}
}

// Len is the number of keys cached.
func (c *DedupCache) Len() int { return c.live }

// Each calls fn with each cached entry, oldest first.
func (c *DedupCache) Each(fn func(key DedupHash, seq uint64, expires int64)) {
	n := len(c.ring)
	for i := range n {
		s := &c.ring[(c.head+i)%n]
		if !s.hole {
			fn(s.key, s.seq, s.expires)
		}
	}
}

// DedupHashOf is the key whose 16 bytes are b.
func DedupHashOf(b []byte) DedupHash { return DedupHash(b[:16]) }
