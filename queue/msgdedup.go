package queue

import (
	"encoding/binary"
)

// Queue-level deduplication (x-message-deduplication=true as a queue
// argument): a message whose x-deduplication-header value is that of a
// message still in the queue (ready, or delivered and not yet settled) is
// not enqueued; with a TTL (Config.DedupTTL, or the message's x-cache-ttl
// header) also while that long has not passed since the original was
// enqueued, whether or not it is still there. A message without the header
// is not checked. The cache keeps at most Config.DedupSize keys, the oldest
// forgotten first.
//
// Dedup is the cache. A queue made with Config.DedupSize > 0 has one in its
// state: OpEnqueue checks and records keys (a duplicate is confirmed to
// its publisher, as routed, and not enqueued), snapshots hold it, and so a
// replicated queue deduplicates the same way on every replica and after a
// leader change. An owner that publishes through the typed methods
// (Publish, PublishAt) drives a Dedup of its own with the same methods.

// DedupHeader is the header whose value is a message's deduplication key;
// DedupTTLHeader a message's own window, in ms.
const (
	DedupHeader    = "x-deduplication-header"
	DedupTTLHeader = "x-cache-ttl"
)

// Dedup is a deduplication cache: keys with the message kept for each (0:
// none in the queue) and the end of their windows. The zero value with
// Size set is ready to use. Keys are only added or updated, never removed
// but by eviction, so its ring has no holes and a snapshot (keys oldest
// first) restores the same order of eviction.
type Dedup struct {
	// Size bounds the keys kept; TTL is the default window in ms (0:
	// none).
	Size int
	TTL  int64
	// Dropped counts the duplicates not enqueued.
	Dropped int64

	cache DedupCache
}

// IntArg is v, a value of a field table (an argument or header), as an
// int64 when it is an integer of any width.
func IntArg(v any) (int64, bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), true
	case uint8:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int64:
		return x, true
	case int:
		return int64(x), true
	}
	return 0, false
}

// Duplicate reports whether key is live in the cache at now: its window
// has not ended or its message is still in q.
func (d *Dedup) Duplicate(q *Queue, key DedupHash, now int64) bool {
	e, ok := d.cache.Find(key)
	if !ok {
		return false
	}
	return (e.Expires != 0 && e.Expires > now) || (e.Seq != 0 && q.Has(e.Seq))
}

// Window is the end of the window of a key enqueued at now with ttl (-1:
// the cache's), 0 for none.
func (d *Dedup) Window(ttl, now int64) int64 {
	if ttl < 0 {
		ttl = d.TTL
	}
	if ttl > 0 {
		return now + ttl
	}
	return 0
}

// Add records key for message seq (0: not kept) with a window to expires
// (0: none), returning the keys it evicted appended to evicted. A key
// already cached keeps its place in the order of eviction.
func (d *Dedup) Add(key DedupHash, seq uint64, expires int64, evicted []DedupHash) []DedupHash {
	if e, ok := d.cache.Find(key); ok {
		e.Seq, e.Expires = seq, expires
		d.cache.Update(e)
		return evicted
	}
	d.cache.Size = d.Size
	if old, ok := d.cache.Insert(key, seq, expires); ok {
		evicted = append(evicted, old)
	}
	return evicted
}

// Extend sets the window of key, when it is cached, to expires and reports
// whether it was.
func (d *Dedup) Extend(key DedupHash, expires int64) bool {
	e, ok := d.cache.Find(key)
	if ok {
		e.Expires = expires
		d.cache.Update(e)
	}
	return ok
}

// Len is the number of keys kept.
func (d *Dedup) Len() int { return d.cache.Len() }

// enqueueDedup is OpEnqueue on a deduplicating queue: a duplicate is
// counted and confirmed, not enqueued; anything else goes through
// applyEnqueue and, when it has the header and was accepted, is recorded.
func (q *Queue) enqueueDedup(cmd *Cmd, out []Effect) []Effect {
	d := q.dedup
	key, ttl, ok := DedupKeyOf(cmd.Msg.Header)
	if !ok {
		return q.applyEnqueue(cmd, out)
	}
	if d.Duplicate(q, key, cmd.Now) {
		if cmd.Publisher != 0 && !q.firstSend(cmd.Publisher, cmd.PubSeq) {
			// A resend of a publish already applied: its outcome stands.
			return append(out, Effect{Kind: EffConfirm, Publisher: cmd.Publisher, PubSeq: cmd.PubSeq})
		}
		d.Dropped++
		if cmd.Publisher != 0 {
			out = append(out, Effect{Kind: EffConfirm, Publisher: cmd.Publisher, PubSeq: cmd.PubSeq})
		}
		return out
	}
	before := q.nextSeq
	out = q.applyEnqueue(cmd, out)
	if q.nextSeq == before {
		return out // refused by a length limit (or a resend): no record
	}
	seq := q.nextSeq
	if !q.Has(seq) {
		seq = 0 // accepted, not kept (a TTL of 0): the window only
	}
	d.Add(key, seq, d.Window(ttl, cmd.Now), nil)
	return out
}

// appendSnapshot appends the cache: the count of duplicates and its keys
// oldest first, each as its 16 bytes, message and window (its bounds are
// in the queue's Config). Snapshots before version 5 held each key as a
// string (restore).
func (d *Dedup) appendSnapshot(b []byte) []byte {
	b = binary.AppendVarint(b, d.Dropped)
	b = binary.AppendUvarint(b, uint64(d.cache.Len()))
	d.cache.Each(func(k DedupHash, seq uint64, expires int64) {
		b = append(b, k[:]...)
		b = binary.AppendUvarint(b, seq)
		b = binary.AppendVarint(b, expires)
	})
	return b
}

// restore reads into d, empty, what appendSnapshot of version wrote.
func (d *Dedup) restore(r *snapReader, version byte) {
	d.Dropped = r.varint()
	for range r.count() {
		var k DedupHash
		if version >= 5 {
			if len(r.b) < 16 {
				r.fail()
				return
			}
			k = DedupHash(r.b[:16])
			r.b = r.b[16:]
		} else {
			k = DedupKeyOfLegacy(r.string())
		}
		seq, exp := r.uvarint(), r.varint()
		if r.err != nil {
			return
		}
		d.Add(k, seq, exp, nil)
	}
}

// Dedup is the queue's deduplication cache, nil unless it was made with
// Config.DedupSize. An owner publishing through the typed methods checks
// and records keys in it itself.
func (q *Queue) Dedup() *Dedup { return q.dedup }
