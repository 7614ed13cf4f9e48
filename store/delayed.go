package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Delayed messages (the broker's delayed exchanges): messages held until a due time,
// under keys that sort by it, so that what is due is a prefix scan and nothing per
// message lives in memory:
//
//	'w' due(8) seq(8) exchangeID(8)   delayed message: due is unix ms, seq orders messages
//	                                  of one due time, exchangeID names the exchange
//	                                  (its definition id, or one the broker gave a
//	                                  transient exchange)
//
// The value is a record of str vhost, str exchange, str routing key, bytes content
// header, then the body (the rest), in chunk records over 4 MiB like a stream chunk.
// Writes go through the journal writer (group commit).

const (
	prefixDelayed  = 'w'
	delayedKeyLen  = 1 + 8 + 8 + 8
	maxDelayedScan = 1 << 16
)

// DelayedKey places a delayed message.
type DelayedKey struct {
	Due      int64 // unix milliseconds, not negative
	Seq      uint64
	Exchange uint64
}

func (k DelayedKey) bytes() []byte {
	b := make([]byte, delayedKeyLen)
	b[0] = prefixDelayed
	binary.BigEndian.PutUint64(b[1:], uint64(max(k.Due, 0)))
	binary.BigEndian.PutUint64(b[9:], k.Seq)
	binary.BigEndian.PutUint64(b[17:], k.Exchange)
	return b
}

func parseDelayedKey(b []byte) (DelayedKey, bool) {
	if len(b) != delayedKeyLen || b[0] != prefixDelayed {
		return DelayedKey{}, false
	}
	return DelayedKey{
		Due:      int64(binary.BigEndian.Uint64(b[1:]) & (1<<63 - 1)),
		Seq:      binary.BigEndian.Uint64(b[9:]),
		Exchange: binary.BigEndian.Uint64(b[17:]),
	}, true
}

// Delayed is a delayed message.
type Delayed struct {
	Key                         DelayedKey
	VHost, Exchange, RoutingKey string
	Header, Body                []byte
}

// AppendDelayed stores m under m.Key in the journal's group commit. done, if not nil,
// runs as for Append: on the writer once durable, or with ErrClosed or ErrTooLarge.
func (s *Store) AppendDelayed(m *Delayed, done func(error)) {
	fields := make([]byte, 0, 4*binary.MaxVarintLen64+len(m.VHost)+len(m.Exchange)+len(m.RoutingKey)+len(m.Header))
	fields = appendString(fields, m.VHost)
	fields = appendString(fields, m.Exchange)
	fields = appendString(fields, m.RoutingKey)
	fields = appendBytes(fields, m.Header)
	buf, n := encodeSetOp(m.Key.bytes(), fields, m.Body)
	s.submit([]op{{kind: opSet, buf: buf, n: n, done: done}}, true, true, done)
}

// RemoveDelayed deletes the delayed messages ms (as DueDelayed gave them) and waits
// until the deletion is durable.
func (s *Store) RemoveDelayed(ms []*Delayed) error {
	if len(ms) == 0 {
		return nil
	}
	ch := make(chan error, 1)
	s.RemoveDelayedAsync(ms, func(err error) { ch <- err })
	return <-ch
}

// RemoveDelayedAsync deletes the delayed messages ms (as DueDelayed gave them), as
// one write, without waiting: done runs once the deletion is durable (on the writer),
// or with its error. ms may be reused once it returns.
func (s *Store) RemoveDelayedAsync(ms []*Delayed, done func(error)) {
	if len(ms) == 0 {
		done(nil)
		return
	}
	ops := make([]op, 0, len(ms))
	s.mu.Lock()
	for _, m := range ms {
		k := m.Key.bytes()
		n := s.takeChunksLocked(k)
		if len(m.Body) > bodyChunkLen {
			n = max(n, uint32((len(m.Body)+bodyChunkLen-1)/bodyChunkLen))
		}
		ops = appendDeleteOps(ops, k, n)
	}
	s.mu.Unlock()
	last := &ops[len(ops)-1]
	last.withNext, last.done = false, done
	s.submit(ops, true, true, done)
}

// appendDeleteOps appends the tied deletions of key and its n chunk records.
func appendDeleteOps(ops []op, key []byte, n uint32) []op {
	ops = append(ops, op{kind: opDelete, buf: key, withNext: true})
	for i := range n {
		ops = append(ops, op{kind: opDelete, buf: chunkKey(key, i), withNext: true})
	}
	return ops
}

// ErrStopScan, returned by the function DueDelayedAfter calls, ends the scan.
var ErrStopScan = errors.New("store: scan stopped")

// DueDelayed calls fn with the delayed messages due at or before until, in key order
// (due time, then seq), at most max of them (at most 65536). The message's slices are
// its own. It stops at fn's first error and returns it.
func (s *Store) DueDelayed(until int64, max int, fn func(m *Delayed) error) error {
	return s.DueDelayedAfter(nil, until, max, fn)
}

// DueDelayedAfter is DueDelayed starting after key after (from the first when nil):
// a reader that had messages deleted without waiting reads on past them. fn may
// return ErrStopScan to end the scan early without an error.
func (s *Store) DueDelayedAfter(after *DelayedKey, until int64, max int, fn func(m *Delayed) error) error {
	max = min(max, maxDelayedScan)
	return s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDelayed}, PrefetchValues: false})
		defer it.Close()
		n := 0
		if after != nil {
			it.Seek(after.bytes())
		} else {
			it.Rewind()
		}
		for ; it.Valid() && n < max; it.Next() {
			item := it.Item()
			k, ok := parseDelayedKey(item.Key())
			if !ok || (after != nil && k == *after) {
				continue // a chunk record, or where the last read ended
			}
			if k.Due > until {
				break
			}
			val, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			m := &Delayed{Key: k}
			body, err := readChunkedValue(txn, item.KeyCopy(nil), val, func(d *decoder) {
				m.VHost, m.Exchange, m.RoutingKey = d.string(), d.string(), d.string()
				m.Header = d.bytes()
			})
			if err != nil {
				return fmt.Errorf("store: delayed message %d/%d: %w", k.Due, k.Seq, err)
			}
			m.Body = body
			n++
			if err := fn(m); err == ErrStopScan {
				return nil
			} else if err != nil {
				return err
			}
		}
		return nil
	})
}

// NextDelayed returns the key of the first delayed message (the earliest due), and
// false when there is none.
func (s *Store) NextDelayed() (DelayedKey, bool, error) {
	var k DelayedKey
	var found bool
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDelayed}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k, found = parseDelayedKey(it.Item().Key()); found {
				return nil
			}
		}
		return nil
	})
	return k, found, err
}

// NextDelayedAfter returns the key of the first delayed message after key after,
// and false when there is none.
func (s *Store) NextDelayedAfter(after DelayedKey) (DelayedKey, bool, error) {
	var k DelayedKey
	var found bool
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDelayed}})
		defer it.Close()
		for it.Seek(after.bytes()); it.Valid(); it.Next() {
			if k, found = parseDelayedKey(it.Item().Key()); found && k != after {
				return nil
			}
			found = false
		}
		return nil
	})
	return k, found, err
}

// DelayedKeys calls fn with the key of every delayed message, in order, reading no
// values.
func (s *Store) DelayedKeys(fn func(k DelayedKey)) error {
	return s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDelayed}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k, ok := parseDelayedKey(it.Item().Key()); ok {
				fn(k)
			}
		}
		return nil
	})
}

// DropDelayed deletes every delayed message whose exchange drop reports true (the
// exchange is gone), with its chunk records, durably, and returns how many it
// deleted. It reads keys only.
func (s *Store) DropDelayed(drop func(exchange uint64) bool) (int, error) {
	type victim struct {
		key []byte
		n   uint32
	}
	var vs []victim
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDelayed}})
		defer it.Close()
		cur := -1 // index in ops of the message whose chunks follow, if dropped
		for it.Rewind(); it.Valid(); it.Next() {
			key := it.Item().Key()
			k, ok := parseDelayedKey(key)
			if !ok {
				// A chunk record ('b' i(4)) of the message before.
				if cur >= 0 && len(key) > delayedKeyLen {
					vs[cur].n++
				}
				continue
			}
			cur = -1
			if drop(k.Exchange) {
				cur = len(vs)
				vs = append(vs, victim{key: k.bytes()})
			}
		}
		return nil
	})
	if err != nil || len(vs) == 0 {
		return 0, err
	}
	// In bounded submissions.
	const batch = 4096
	for i := 0; i < len(vs); i += batch {
		var ops []op
		s.mu.Lock()
		for _, v := range vs[i:min(i+batch, len(vs))] {
			s.takeChunksLocked(v.key)
			ops = appendDeleteOps(ops, v.key, v.n)
		}
		s.mu.Unlock()
		ops[len(ops)-1].withNext = false
		if err := s.submitWait(ops); err != nil {
			return 0, err
		}
	}
	return len(vs), nil
}
