package broker

import (
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Queue-level deduplication, the rabbitmq-message-deduplication plugin's
// queue interface (x-message-deduplication=true as a queue argument) with
// LavinMQ's cache arguments: a message whose x-deduplication-header value
// is that of a message still in the queue (ready, or delivered and not yet
// acknowledged) is not enqueued; with x-cache-ttl (or the message's
// x-cache-ttl header) also while that long has not passed since the
// original was enqueued, whether or not it is still there. A message
// without the header is not checked. The queue keeps at most x-cache-size
// keys (oldest forgotten first). A dropped duplicate counts as routed: a
// confirming publisher gets basic.ack (the plugin on RabbitMQ answers
// basic.nack; see docs/plugins-builtin.md), a mandatory one no return.
//
// Keys of messages in the queue need no store of their own: at a restart
// they are found again from the queue's recovered messages. With
// x-cache-persistence=disk a key with a TTL is also written to the store
// ('u' keys, as exchanges' caches, under the queue's store id with
// queueDedupID set) so that its window outlives the message and a
// restart.

// queueDedupID marks the store ids of queues' caches among the exchanges'.
const queueDedupID = 1 << 62

// queueDedup marks a deduplicating queue; its cache is in the queue's
// state (queue.Dedup, made from Config.DedupSize and DedupTTL), so that a
// replicated queue's replicas all hold it. Guarded by the queue's mu.
type queueDedup struct {
	persist bool
}

// parseQueueDedup reads the deduplication arguments of a queue: nil
// unless x-message-deduplication is true; they go to cfg.
func parseQueueDedup(args amqp.Table, cfg *queue.Config) (*queueDedup, error) {
	c, err := parseDedupArgs(false, args, amqp.ClassQueue, 10)
	if c == nil || err != nil {
		return nil, err
	}
	cfg.DedupSize, cfg.DedupTTL = c.size, c.ttl
	return &queueDedup{persist: c.persist}, nil
}

// dedupLocked checks msg, about to be enqueued on qe, against qe's cache:
// it reports whether msg is a duplicate, and otherwise the key and TTL to
// record once it has a sequence number (ok false: nothing to record).
// Hold qe.mu.
func (qe *queueEntity) dedupLocked(msg *queue.Message, now int64) (dup bool, key queue.DedupHash, ttl int64, ok bool) {
	key, ttl, ok = queue.DedupKeyOf(msg.Header)
	if !ok {
		return false, key, 0, false
	}
	if qe.q.Dedup().Duplicate(qe.q, key, now) {
		return true, key, 0, false
	}
	return false, key, ttl, true
}

// enqueueDedupLocked is enqueueLocked for a deduplicating queue: a
// duplicate is dropped (routed: its confirm, if any, is an ack); anything
// else is enqueued and, when it has the header, recorded. Hold qe.mu.
func (ch *channel) enqueueDedupLocked(qe *queueEntity, msg *queue.Message, ttl int64, now *int64, confirmSeq uint64, dispatch bool, throttle *chan struct{}) bool {
	if *now == 0 {
		*now = nowMs()
	}
	dup, key, keyTTL, ok := qe.dedupLocked(msg, *now)
	cache := qe.q.Dedup()
	if dup {
		cache.Dropped++
		return false
	}
	var expires int64
	st, id := qe.vhost.b.cfg.Store, qe.dedupStoreID()
	if ok {
		expires = cache.Window(keyTTL, *now)
		if expires != 0 && id != 0 {
			// Written before the message's journal record: durable no
			// later than its confirm.
			st.PutDedup(id, key, expires)
		}
	}
	before := qe.q.LastSeq()
	dead := ch.enqueueClassicLocked(qe, msg, ttl, now, confirmSeq, dispatch, throttle)
	if !ok {
		return dead
	}
	seq := qe.q.LastSeq()
	if seq == before {
		// Refused (a length limit): a retry is no duplicate.
		if expires != 0 && id != 0 {
			st.DeleteDedup(id, key)
		}
		return dead
	}
	if !qe.q.Has(seq) {
		seq = 0 // accepted but not kept (a TTL of 0): the window only
	}
	var evicted [1]queue.DedupHash
	for _, k := range cache.Add(key, seq, expires, evicted[:0]) {
		if id != 0 {
			st.DeleteDedup(id, k)
		}
	}
	return dead
}

// dedupStoreID is the store id of qe's cache, 0 when it is not stored.
// Hold qe.mu.
func (qe *queueEntity) dedupStoreID() uint64 {
	if qe.dedup == nil || !qe.dedup.persist || qe.storeID == 0 {
		return 0
	}
	return qe.storeID | queueDedupID
}

// loadQueueDedup adds the stored windows of qe's persistent cache, after
// its messages were recovered, and deletes the expired ones.
func (b *Broker) loadQueueDedup(qe *queueEntity, now int64) error {
	st := b.cfg.Store
	id := qe.dedupStoreID()
	if st == nil || id == 0 {
		return nil
	}
	d := qe.q.Dedup()
	var stale []queue.DedupHash
	var texts [][]byte
	err := st.LoadDedup(id, func(k []byte, hashed bool, expires int64) {
		var key queue.DedupHash
		if hashed {
			key = queue.DedupHashOf(k)
		} else {
			// Stored with its text, before keys were hashes: stored
			// again as its hash.
			texts = append(texts, append([]byte(nil), k...))
			key = queue.DedupKeyOfLegacy(string(k))
		}
		if expires <= now {
			if hashed {
				stale = append(stale, key)
			}
			return
		}
		if !hashed {
			st.PutDedup(id, key, expires)
		}
		if d.Extend(key, expires) {
			return
		}
		stale = d.Add(key, 0, expires, stale)
	})
	for _, k := range stale {
		st.DeleteDedup(id, k)
	}
	for _, k := range texts {
		st.DeleteDedupText(id, k)
	}
	return err
}

// dedupGone returns the test DropDedup deletes stored cache entries by:
// those of exchanges that are not delayed or deduplicating any more, and
// of queues that are gone or no longer keep a persistent cache.
func (b *Broker) dedupGone() func(id uint64) bool {
	live := make(map[uint64]bool)
	vhosts := b.allVHosts()
	for _, v := range vhosts {
		v.mu.RLock()
		for _, qe := range v.queues {
			if qe.dedup != nil && qe.dedup.persist && qe.storeID != 0 {
				live[qe.storeID|queueDedupID] = true
			}
		}
		v.mu.RUnlock()
	}
	return func(id uint64) bool {
		if id&queueDedupID != 0 && id&transientDelayedID == 0 {
			return !live[id]
		}
		return b.delayedGone(id)
	}
}

// dropQueueDedup has the scheduler delete the stored cache of qe, deleted.
func (b *Broker) dropQueueDedup(qe *queueEntity) {
	if qe.dedupStoreID() == 0 {
		return
	}
	d := &b.delayed
	d.sweep.Store(true)
	if d.wake != nil {
		d.signal()
	}
}
