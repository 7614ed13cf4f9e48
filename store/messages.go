package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// Message is a journaled message of a durable queue.
type Message struct {
	Exchange, RoutingKey string
	Header               []byte // raw content-header frame payload
	Body                 []byte
	Deliveries           uint32
	// Expires is when the message expires (unix milliseconds; 0 = never),
	// so that a TTL keeps counting across a restart.
	Expires int64
}

// ScanStats sums up a ScanQueue.
type ScanStats struct {
	Messages int // messages passed to fn
	Bytes    int // body bytes of those messages
	Corrupt  int // records skipped: bad checksum, version or encoding
}

// encodedMessageLen is an upper bound of appendMessage's output for m.
func encodedMessageLen(m *Message) int {
	return recordHeaderLen + binary.MaxVarintLen32 + binary.MaxVarintLen64 +
		uvarintLen(uint64(len(m.Exchange))) + len(m.Exchange) +
		uvarintLen(uint64(len(m.RoutingKey))) + len(m.RoutingKey) +
		uvarintLen(uint64(len(m.Header))) + len(m.Header) +
		len(m.Body)
}

// appendMessage appends m's record to b: record header, deliveries, exchange, routing
// key, content header, then the body to the end.
func appendMessage(b []byte, m *Message) []byte {
	start := len(b)
	b = appendMessageFields(beginRecord(b), m)
	b = append(b, m.Body...)
	sealRecord(b[start:])
	return b
}

// appendMessageFields appends the fields of m's record before the body.
func appendMessageFields(b []byte, m *Message) []byte {
	b = binary.AppendUvarint(b, uint64(m.Deliveries))
	b = binary.AppendUvarint(b, uint64(max(m.Expires, 0)))
	b = appendString(b, m.Exchange)
	b = appendString(b, m.RoutingKey)
	return appendBytes(b, m.Header)
}

// decodeMessage decodes a message record. Header and Body alias val. For a
// record of format formatChunked, Body is nil and c says where it is
// (readBody).
func decodeMessage(val []byte) (m *Message, c chunking, err error) {
	version, payload, err := openAnyRecord(val)
	if err != nil {
		return nil, c, err
	}
	if version != formatVersion && version != formatChunked {
		return nil, c, fmt.Errorf("%w: format version %d", ErrCorrupt, version)
	}
	d := decoder{b: payload}
	deliveries := d.uvarint()
	expires := d.uvarint()
	m = &Message{Exchange: d.string(), RoutingKey: d.string(), Header: d.raw()}
	if expires > 1<<62 {
		d.fail()
	}
	m.Expires = int64(expires)
	if deliveries > 1<<32-1 {
		d.fail()
	}
	if version == formatChunked {
		c.bodyLen, c.chunkLen = d.uvarint(), d.uvarint()
		if c.chunkLen == 0 {
			d.fail()
		}
	}
	if d.err == nil {
		m.Deliveries = uint32(deliveries)
		if version == formatVersion {
			m.Body, d.b = d.b, nil
		}
	}
	if err := d.finish(); err != nil {
		return nil, chunking{}, err
	}
	return m, c, nil
}

// decodeMark decodes a delivery-mark record.
func decodeMark(val []byte) (uint32, error) {
	payload, err := openRecord(val)
	if err != nil {
		return 0, err
	}
	d := decoder{b: payload}
	v := d.uvarint()
	if v > 1<<32-1 {
		d.fail()
	}
	return uint32(v), d.finish()
}

// ReadMessage reads message seq of queueID back, for paging a body in. The Message and
// its slices belong to the caller. It returns ErrNotFound if there is no such message and
// an error wrapping ErrCorrupt if its record is bad. It sees what the writer has
// written, not what is still pending.
func (s *Store) ReadMessage(queueID, seq uint64) (*Message, error) {
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	var m *Message
	s.activity.Add(1)
	err := s.db.View(func(txn *badger.Txn) error {
		key := msgKey(queueID, seq)
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		val, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		var c chunking
		if m, c, err = decodeMessage(val); err != nil {
			return err
		}
		if c.chunkLen > 0 {
			if m.Body, err = readBody(txn, key, c); err != nil {
				return err
			}
		}
		item, err = txn.Get(markKey(queueID, seq))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(val []byte) error {
			n, err := decodeMark(val)
			if err != nil {
				s.log.Warn("ignoring corrupt delivery mark", zap.Uint64("queue-id", queueID), zap.Uint64("seq", seq), zap.Error(err))
				return nil
			}
			m.Deliveries = n
			return nil
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: read message %d/%d: %w", queueID, seq, err)
	}
	return m, nil
}

// ScanQueue calls fn for each message of queueID in seq order, with its delivery count
// from the latest MarkDelivered. Each Message belongs to fn. A corrupt record is logged,
// counted in ScanStats.Corrupt and skipped; the scan goes on. An error from fn stops the
// scan and is returned as is. ScanQueue is for recovery, before the queue takes traffic;
// it sees what the writer has written, not what is still pending. fn must not call Close.
func (s *Store) ScanQueue(queueID uint64, fn func(seq uint64, m *Message) error) (ScanStats, error) {
	var st ScanStats
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return st, ErrClosed
	}
	prefix := queuePrefix(queueID)
	s.activity.Add(1)
	txn := s.db.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()

	var (
		cur    *Message // message read and not yet passed to fn
		curSeq uint64
		marks  []msgRef
	)
	emit := func() error {
		if cur == nil {
			return nil
		}
		m := cur
		cur = nil
		st.Messages++
		st.Bytes += len(m.Body)
		return fn(curSeq, m)
	}
	type chunkedMsg struct {
		key [msgKeyLen]byte
		n   uint32
	}
	var chunked []chunkedMsg // messages with chunk records
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		if k := item.Key(); len(k) == chunkKeyLen && k[msgKeyLen] == chunkSuffix {
			continue // read with its message
		}
		seq, mark, ok := parseQueueKey(item.Key())
		if !ok {
			st.Corrupt++
			s.log.Warn("skipping journal record with malformed key", zap.Uint64("queue-id", queueID), zap.Binary("key", item.Key()))
			continue
		}
		if mark {
			if cur == nil || curSeq != seq {
				continue // orphan mark: its message is gone or corrupt
			}
			marks = append(marks, msgRef{queueID, seq}) // Remove deletes even a corrupt one
			err := item.Value(func(val []byte) error {
				n, err := decodeMark(val)
				if err == nil {
					cur.Deliveries = n
				}
				return err
			})
			if errors.Is(err, ErrCorrupt) {
				st.Corrupt++
				s.log.Warn("ignoring corrupt delivery mark", zap.Uint64("queue-id", queueID), zap.Uint64("seq", seq), zap.Error(err))
				continue
			}
			if err != nil {
				return st, fmt.Errorf("store: scan queue %d: %w", queueID, err)
			}
			continue
		}
		if err := emit(); err != nil {
			return st, err
		}
		val, err := item.ValueCopy(nil)
		if err != nil {
			return st, fmt.Errorf("store: scan queue %d: %w", queueID, err)
		}
		m, c, err := decodeMessage(val)
		if err == nil && c.chunkLen > 0 {
			chunked = append(chunked, chunkedMsg{[msgKeyLen]byte(item.Key()), uint32(c.chunks())})
			m.Body, err = readBody(txn, item.Key(), c)
			if err != nil && !errors.Is(err, ErrCorrupt) {
				return st, fmt.Errorf("store: scan queue %d: %w", queueID, err)
			}
		}
		if err != nil {
			st.Corrupt++
			s.log.Warn("skipping corrupt message", zap.Uint64("queue-id", queueID), zap.Uint64("seq", seq), zap.Error(err))
			continue
		}
		cur, curSeq = m, seq
	}
	if err := emit(); err != nil {
		return st, err
	}
	if len(marks) > 0 || len(chunked) > 0 {
		// Remove must delete these marks and chunks too.
		s.mu.Lock()
		for _, r := range marks {
			s.marked[r] = struct{}{}
		}
		for _, c := range chunked {
			s.noteChunksLocked(c.key[:], c.n)
		}
		s.mu.Unlock()
	}
	return st, nil
}

// RemoveQueue deletes every journal record of queueID, durably. It first waits for what
// was submitted before it, so no earlier Append of the queue outlives it.
func (s *Store) RemoveQueue(queueID uint64) error {
	s.mu.Lock()
	for r := range s.marked {
		if r.queueID == queueID {
			delete(s.marked, r)
		}
	}
	for _, m := range s.lateMarks {
		for r := range m {
			if r.queueID == queueID {
				delete(m, r)
				s.late--
			}
		}
	}
	s.mu.Unlock()
	return s.removeAll(queuePrefix(queueID), "queue", queueID)
}

// removeAll deletes every key under prefix (the records of what id names), durably,
// after what was submitted before it.
func (s *Store) removeAll(prefix []byte, what string, id uint64) error {
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	s.mu.Lock()
	for k := range s.chunked {
		if strings.HasPrefix(k, string(prefix)) {
			delete(s.chunked, k)
		}
	}
	s.mu.Unlock()
	if err := s.Flush(); err != nil {
		return err
	}
	if err := s.removePrefix(prefix); err != nil {
		return fmt.Errorf("store: remove %s %d: %w", what, id, err)
	}
	return nil
}

// removePrefix deletes every key under prefix, durably, in transactions of
// bounded size, each from a fresh key-only scan.
func (s *Store) removePrefix(prefix []byte) error {
	const chunk = 10000
	keys := make([][]byte, 0, chunk)
	for {
		keys = keys[:0]
		s.activity.Add(1)
		err := s.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < chunk; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		w := batchWriter{db: s.db, txn: s.db.NewTransaction(true)}
		for _, k := range keys {
			if err = w.del(k); err != nil {
				break
			}
		}
		if err == nil {
			err = w.txn.Commit()
		}
		w.txn.Discard()
		if err != nil {
			return err
		}
		// The scan mapped the table pages it read: give them back now
		// rather than at the next trim.
		s.trimMappings()
	}
}
