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

	// mu guards the fields below (a leaf lock).
	mu      sync.Mutex
	expires map[string]int64 // key → unix ms (0 = never)
	order   []string         // insertion order, a ring of size entries
	head    int              // oldest in order
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
	return c, nil
}

// dedupKeyOf is the cache key of a message and the TTL its x-cache-ttl
// header asks for (queue.DedupKey: exchanges and queues key alike).
func dedupKeyOf(header []byte) (string, int64, bool) { return queue.DedupKey(header) }

// seen reports whether key is in the cache and live at now; if not, it
// adds it with ttl (-1 = the cache's). Entries evicted or found expired
// are reported through drop (for the store), outside of nothing: drop is
// called with c.mu held and must not block.
func (c *dedupCache) seen(key string, ttl, now int64, drop func(string)) (dup bool, expires int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if exp, ok := c.expires[key]; ok {
		if exp == 0 || exp > now {
			return true, 0
		}
		delete(c.expires, key) // expired: its slot in order stays until reused
	}
	if ttl < 0 {
		ttl = c.ttl
	}
	if ttl > 0 {
		expires = now + ttl
	}
	c.insertLocked(key, expires, drop)
	return false, expires
}

// insertLocked adds key, evicting the oldest entry when full.
func (c *dedupCache) insertLocked(key string, expires int64, drop func(string)) {
	if c.expires == nil {
		c.expires = make(map[string]int64)
	}
	if len(c.order) < c.size {
		c.order = append(c.order, key)
	} else {
		old := c.order[c.head]
		// The ring slot may name a key re-added since (expired, then seen
		// again): only evict it if it is not the same slot's newer entry.
		if _, ok := c.expires[old]; ok && old != key {
			delete(c.expires, old)
			if drop != nil {
				drop(old)
			}
		}
		c.order[c.head] = key
		c.head = (c.head + 1) % c.size
	}
	c.expires[key] = expires
}

// len is the number of entries (management API).
func (c *dedupCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.expires)
}

// isDuplicate checks msg against ex's cache and records it when new.
func (ch *channel) isDuplicate(ex *exchangeEntity, msg *queue.Message) bool {
	c := ex.plug.dedup
	key, ttl, ok := dedupKeyOf(msg.Header)
	if !ok {
		return false
	}
	st := ch.c.b.cfg.Store
	persist := c.persist && st != nil
	var evicted []string
	var drop func(string)
	if persist {
		drop = func(k string) { evicted = append(evicted, k) }
	}
	dup, expires := c.seen(key, ttl, nowMs(), drop)
	if persist && !dup {
		for _, k := range evicted {
			st.DeleteDedup(c.id, k)
		}
		st.PutDedup(c.id, key, expires)
	}
	return dup
}

// loadDedup fills a persistent cache from the store at recovery.
func (b *Broker) loadDedup(c *dedupCache) error {
	st := b.cfg.Store
	if st == nil || !c.persist {
		return nil
	}
	now := nowMs()
	var stale []string
	err := st.LoadDedup(c.id, func(key string, expires int64) {
		if expires != 0 && expires <= now {
			stale = append(stale, key)
			return
		}
		c.mu.Lock()
		c.insertLocked(key, expires, func(k string) { stale = append(stale, k) })
		c.mu.Unlock()
	})
	for _, k := range stale {
		st.DeleteDedup(c.id, k)
	}
	return err
}
