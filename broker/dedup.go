package broker

import (
	"sync"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Exchange-level deduplication, the rabbitmq-message-deduplication
// plugin's interface (exchange type x-message-deduplication, which routes
// as fanout) and LavinMQ's (x-message-deduplication=true on an exchange of
// any type). A message whose x-deduplication-header value the exchange
// has seen within the cache's TTL is not routed (a mandatory one is
// returned, as for any unroutable message); a message without the header
// is not checked. The cache holds at most x-cache-size entries (oldest
// evicted first) for x-cache-ttl ms each (or the message's x-cache-ttl
// header; no TTL = until evicted). With x-cache-persistence=disk the
// entries are also written to the store (store/dedup.go) and loaded again
// at a restart.

const (
	argCacheSize        = "x-cache-size"
	argCacheTTL         = "x-cache-ttl"
	argCachePersistence = "x-cache-persistence"
	// defaultCacheSize is the cache bound when x-message-deduplication is
	// given without x-cache-size; maxCacheSize bounds any.
	defaultCacheSize = 100_000
	maxCacheSize     = 10_000_000
)

// dedupCache is an exchange's cache of recently seen keys.
type dedupCache struct {
	size    int
	ttl     int64 // ms, 0 = none
	persist bool
	// id names the exchange in the store (exchangePlug.id).
	id uint64

	// mu guards keys (a leaf lock): entries' Expires is unix ms (0 =
	// never).
	mu   sync.Mutex
	keys queue.DedupCache
}

// parseDedupArgs reads the deduplication arguments of an exchange: on
// when the type is x-message-deduplication (then x-cache-size is
// required, as the plugin has it) or x-message-deduplication is true.
func parseDedupArgs(isType bool, args amqp.Table, cls, mth uint16) (*dedupCache, error) {
	on, _ := args[argDedup].(bool)
	if !isType && !on {
		return nil, nil
	}
	c := &dedupCache{size: defaultCacheSize}
	if v, ok := args[argCacheSize]; ok {
		n, isInt := argInt(v)
		if !isInt || n < 1 || n > maxCacheSize {
			return nil, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "x-cache-size must be an integer from 1 to %d, got '%v'", maxCacheSize, v)
		}
		c.size = int(n)
	} else if isType {
		return nil, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0")
	}
	if v, ok := args[argCacheTTL]; ok {
		n, isInt := argInt(v)
		if !isInt || n < 0 {
			return nil, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "x-cache-ttl must be a non-negative integer (ms), got '%v'", v)
		}
		c.ttl = n
	}
	if v, ok := args[argCachePersistence]; ok {
		switch v {
		case "memory":
		case "disk":
			c.persist = true
		default:
			return nil, amqp.Errorf(amqp.PreconditionFailed, cls, mth, "x-cache-persistence must be 'memory' or 'disk', got '%v'", v)
		}
	}
	c.keys.Size = c.size
	return c, nil
}

// seen reports whether key is in the cache and live at now; if not, it
// adds it with ttl (-1 = the cache's), returning its expiry and the key it
// evicted (evicted true). An entry found expired is removed first, so
// that the key is added again as the newest.
func (c *dedupCache) seen(key queue.DedupHash, ttl, now int64) (dup bool, expires int64, old queue.DedupHash, evicted bool) {
	if ttl < 0 {
		ttl = c.ttl
	}
	if ttl > 0 {
		expires = now + ttl
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.keys.Find(key); ok {
		if e.Expires == 0 || e.Expires > now {
			return true, 0, old, false
		}
		c.keys.Remove(e)
	}
	old, evicted = c.keys.Insert(key, 0, expires)
	return false, expires, old, evicted
}

// len is the number of entries (management API).
func (c *dedupCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys.Len()
}

// isDuplicate checks msg against ex's cache and records it when new.
func (ch *channel) isDuplicate(ex *exchangeEntity, msg *queue.Message) bool {
	c := ex.plug.dedup
	key, ttl, ok := queue.DedupKeyOf(msg.Header)
	if !ok {
		return false
	}
	dup, expires, old, evicted := c.seen(key, ttl, nowMs())
	if st := ch.c.b.cfg.Store; c.persist && st != nil && !dup {
		if evicted {
			st.DeleteDedup(c.id, old)
		}
		st.PutDedup(c.id, key, expires)
	}
	return dup
}

// loadDedup fills a persistent cache from the store at recovery, oldest
// entry first. Entries stored with their key's text (before keys were
// hashes) are stored again as hashes.
func (b *Broker) loadDedup(c *dedupCache) error {
	st := b.cfg.Store
	if st == nil || !c.persist {
		return nil
	}
	now := nowMs()
	var stale []queue.DedupHash
	var texts [][]byte
	err := st.LoadDedup(c.id, func(k []byte, hashed bool, expires int64) {
		var key queue.DedupHash
		if hashed {
			key = queue.DedupHashOf(k)
		} else {
			texts = append(texts, append([]byte(nil), k...))
			key = queue.DedupKeyOfLegacy(string(k))
		}
		if expires != 0 && expires <= now {
			if hashed {
				stale = append(stale, key)
			}
			return
		}
		c.mu.Lock()
		if _, ok := c.keys.Find(key); !ok {
			if old, ok := c.keys.Insert(key, 0, expires); ok {
				stale = append(stale, old)
			}
		}
		c.mu.Unlock()
		if !hashed {
			st.PutDedup(c.id, key, expires)
		}
	})
	for _, k := range stale {
		st.DeleteDedup(c.id, k)
	}
	for _, k := range texts {
		st.DeleteDedupText(c.id, k)
	}
	return err
}
