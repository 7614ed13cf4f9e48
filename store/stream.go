package store

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// Stream keys (see doc.go): under 's' streamID(8), a chunk's header ('c'), its
// messages ('d') and named consumers' offsets ('o').
const (
	prefixStream      = 's'
	streamChunkHeader = 'c'
	streamChunkData   = 'd'
	streamOffset      = 'o'
	// streamLongOffset keys the offset of a consumer whose name does not
	// fit in a key: 's' streamID(8) 'h' SHA-256(name), the name in the
	// record.
	streamLongOffset = 'h'
	streamKeyLen     = 1 + 8 + 1 + 8
	// maxOffsetName is the longest consumer name kept in its key (a key of
	// an opSet is at most 255 bytes).
	maxOffsetName = 255 - (1 + 8 + 1)
)

// StreamChunk is a chunk of a stream: a batch of messages appended together.
type StreamChunk struct {
	First     uint64 // offset of the first message
	Timestamp int64  // unix ms
	Segment   uint64
	Bytes     int64 // body bytes
	Count     uint32
	// Filter summary (see queue.ChunkInfo).
	Filters    []string
	Unfiltered bool
	AnyFilter  bool
	// parts is the number of chunk records of its data when the data is
	// too big for one value (large.go), else 0.
	parts uint32
}

// StreamMessage is one message of a chunk. Its slices alias the chunk's
// buffer when read back.
type StreamMessage struct {
	Exchange, RoutingKey string
	Header, Body         []byte
	Filter               string
}

// StreamMessages are the messages of a chunk to write: Len of them, the
// ith by At. The store reads them before AppendStreamChunk returns, so an
// owner hands its own list over as it is, without building a copy.
type StreamMessages interface {
	Len() int
	At(i int) StreamMessage
}

// StreamMessageList is a slice of messages as StreamMessages.
type StreamMessageList []StreamMessage

// Len implements StreamMessages.
func (l StreamMessageList) Len() int { return len(l) }

// At implements StreamMessages.
func (l StreamMessageList) At(i int) StreamMessage { return l[i] }

func streamKey(streamID uint64, kind byte, off uint64) []byte {
	b := make([]byte, streamKeyLen)
	b[0] = prefixStream
	binary.BigEndian.PutUint64(b[1:9], streamID)
	b[9] = kind
	binary.BigEndian.PutUint64(b[10:18], off)
	return b
}

func streamPrefix(streamID uint64, kind byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{prefixStream}, streamID)
	if kind != 0 {
		b = append(b, kind)
	}
	return b
}

func appendChunkHeader(b []byte, c *StreamChunk) []byte {
	start := len(b)
	b = beginRecord(b)
	b = binary.AppendUvarint(b, uint64(c.Count))
	b = binary.AppendVarint(b, c.Timestamp)
	b = binary.AppendUvarint(b, uint64(c.Bytes))
	b = binary.AppendUvarint(b, c.Segment)
	var flags uint64
	if c.Unfiltered {
		flags |= 1
	}
	if c.AnyFilter {
		flags |= 2
	}
	if c.parts > 0 {
		flags |= 4
	}
	b = binary.AppendUvarint(b, flags)
	b = appendStrings(b, c.Filters)
	if c.parts > 0 {
		b = binary.AppendUvarint(b, uint64(c.parts))
	}
	sealRecord(b[start:])
	return b
}

func decodeChunkHeader(first uint64, val []byte) (*StreamChunk, error) {
	payload, err := openRecord(val)
	if err != nil {
		return nil, err
	}
	d := decoder{b: payload}
	c := &StreamChunk{First: first}
	n := d.uvarint()
	c.Timestamp = d.varint()
	c.Bytes = int64(d.uvarint())
	c.Segment = d.uvarint()
	flags := d.uvarint()
	c.Filters = d.strings()
	if flags&4 != 0 {
		p := d.uvarint()
		if p == 0 || p > 1<<32-1 {
			d.fail()
		}
		c.parts = uint32(p)
	}
	if n > 1<<32-1 {
		d.fail()
	}
	c.Count = uint32(n)
	c.Unfiltered, c.AnyFilter = flags&1 != 0, flags&2 != 0
	if err := d.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// AppendStreamChunk writes a chunk of stream streamID: its header and its
// messages, group-committed by the journal writer like Append (same
// backpressure, same contract for done). Messages are encoded before it
// returns.
//
// Data over bodyChunkLen is kept in chunk records (large.go), like a large
// message body: the data record then says how long the data is and the
// chunk header how many chunk records it has.
func (s *Store) AppendStreamChunk(streamID uint64, c *StreamChunk, msgs StreamMessages, done func(error)) {
	s.appendStreamChunk(streamID, c, msgs, done, true)
}

// AppendReplicaChunk is AppendStreamChunk for a chunk that is durable
// elsewhere already (a replicated stream's chunk, in its group's log on a
// majority of nodes): it has no sync of its own but rides with the next
// group commit, or is written within removeDelay. done is called once it
// is durable.
func (s *Store) AppendReplicaChunk(streamID uint64, c *StreamChunk, msgs StreamMessages, done func(error)) {
	s.appendStreamChunk(streamID, c, msgs, done, false)
}

func (s *Store) appendStreamChunk(streamID uint64, c *StreamChunk, msgs StreamMessages, done func(error), urgent bool) {
	size, n := 0, msgs.Len()
	for i := range n {
		m := msgs.At(i)
		size += uvarintLen(uint64(len(m.Exchange))) + len(m.Exchange) +
			uvarintLen(uint64(len(m.RoutingKey))) + len(m.RoutingKey) +
			uvarintLen(uint64(len(m.Header))) + len(m.Header) +
			uvarintLen(uint64(len(m.Body))) + len(m.Body) +
			uvarintLen(uint64(len(m.Filter))) + len(m.Filter)
	}
	data := make([]byte, 1+streamKeyLen, 1+streamKeyLen+recordHeaderLen+size)
	data[0] = streamKeyLen
	copy(data[1:], streamKey(streamID, streamChunkData, c.First))
	start := len(data)
	var head uint32
	ch := *c
	ch.parts = 0
	if size <= bodyChunkLen {
		data = beginRecord(data)
		for i := range n {
			m := msgs.At(i)
			data = appendString(data, m.Exchange)
			data = appendString(data, m.RoutingKey)
			data = appendBytes(data, m.Header)
			data = appendBytes(data, m.Body)
			data = appendString(data, m.Filter)
		}
		sealRecord(data[start:])
	} else {
		parts := (size + bodyChunkLen - 1) / bodyChunkLen
		data = slices.Grow(data, 2*binary.MaxVarintLen64+parts*recordHeaderLen)
		data = append(data, formatChunked, 0, 0, 0, 0)
		data = binary.AppendUvarint(data, uint64(size))
		data = binary.AppendUvarint(data, bodyChunkLen)
		sealRecord(data[start:])
		head = uint32(len(data) - start)
		w := newChunkWriter(data, size)
		for i := range n {
			m := msgs.At(i)
			w.writeString(m.Exchange)
			w.writeString(m.RoutingKey)
			w.writeBytes(m.Header)
			w.writeBytes(m.Body)
			w.writeString(m.Filter)
		}
		data = w.finish()
		ch.parts = uint32(parts)
	}
	hdr := append([]byte{streamKeyLen}, streamKey(streamID, streamChunkHeader, c.First)...)
	hdr = appendChunkHeader(hdr, &ch)
	// The data goes first: a chunk's header is never durable without it.
	s.submit([]op{{kind: opSet, buf: data, n: head, withNext: true}, {kind: opSet, buf: hdr, done: done}}, true, urgent, done)
}

// SetStreamOffset stores the acknowledged offset of named consumer name of
// streamID. Like MarkDelivered it has no sync of its own: it rides with the
// next group commit or is written within ~200 ms. Dropped after Close.
// A name of any length is kept: one over maxOffsetName bytes is keyed by its
// SHA-256 and kept whole in the record.
func (s *Store) SetStreamOffset(streamID uint64, name string, off uint64) {
	var key []byte
	long := len(name) > maxOffsetName
	if long {
		sum := sha256.Sum256([]byte(name))
		key = append(streamPrefix(streamID, streamLongOffset), sum[:]...)
	} else {
		key = append(streamPrefix(streamID, streamOffset), name...)
	}
	buf := append([]byte{byte(len(key))}, key...)
	buf = binary.AppendUvarint(beginRecord(buf), off)
	if long {
		buf = appendString(buf, name)
	}
	sealRecord(buf[1+len(key):])
	s.submit([]op{{kind: opSet, buf: buf}}, false, false, nil)
}

// RemoveStreamChunks deletes chunks (by first offset) of streamID, batched
// like Remove (no sync of their own).
func (s *Store) RemoveStreamChunks(streamID uint64, firsts []uint64) {
	ops := make([]op, 0, 2*len(firsts))
	s.mu.Lock()
	for _, f := range firsts {
		data := streamKey(streamID, streamChunkData, f)
		ops = append(ops, op{kind: opRemove, buf: streamKey(streamID, streamChunkHeader, f)},
			op{kind: opRemove, buf: data, n: s.takeChunksLocked(data)})
	}
	s.mu.Unlock()
	s.submit(ops, false, false, nil)
}

// StreamChunkFirsts lists the first offsets of the chunks of streamID
// whose headers are in the store, in order (keys only: no value is read).
// A chunk's header is never durable without its data.
func (s *Store) StreamChunkFirsts(streamID uint64) ([]uint64, error) {
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.activity.Add(1)
	var firsts []uint64
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamPrefix(streamID, streamChunkHeader), PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k := it.Item().Key(); len(k) == streamKeyLen {
				firsts = append(firsts, binary.BigEndian.Uint64(k[10:]))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list stream %d: %w", streamID, err)
	}
	return firsts, nil
}

// StreamIndex is what recovery reads of a stream: its chunk headers in order
// and its named consumers' offsets.
type StreamIndex struct {
	Chunks  []StreamChunk
	Offsets map[string]uint64
	Corrupt int
}

// LoadStream reads the index of streamID: chunk headers (not their
// messages) and named offsets. A chunk header without its data (a crash
// between the two writes cannot leave one, but a corrupt record can) ends
// the index there.
func (s *Store) LoadStream(streamID uint64) (StreamIndex, error) {
	idx := StreamIndex{Offsets: make(map[string]uint64)}
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return idx, ErrClosed
	}
	s.activity.Add(1)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamPrefix(streamID, streamChunkHeader), PrefetchValues: false})
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) != streamKeyLen {
				idx.Corrupt++
				continue
			}
			first := binary.BigEndian.Uint64(k[10:])
			var c *StreamChunk
			err := item.Value(func(val []byte) error {
				var err error
				c, err = decodeChunkHeader(first, val)
				return err
			})
			if err != nil {
				idx.Corrupt++
				s.log.Warn("skipping corrupt stream chunk header", zap.Uint64("stream-id", streamID), zap.Uint64("offset", first), zap.Error(err))
				continue
			}
			if n := len(idx.Chunks); n > 0 && idx.Chunks[n-1].First+uint64(idx.Chunks[n-1].Count) != first {
				s.log.Warn("gap in stream chunks", zap.Uint64("stream-id", streamID), zap.Uint64("offset", first))
			}
			if c.parts > 0 {
				s.mu.Lock()
				s.noteChunksLocked(streamKey(streamID, streamChunkData, first), c.parts)
				s.mu.Unlock()
			}
			idx.Chunks = append(idx.Chunks, *c)
		}
		it.Close()
		prefix := streamPrefix(streamID, streamOffset)
		it = txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer func() { it.Close() }()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			name := string(item.Key()[len(prefix):])
			off, err := readUvarintRecord(item)
			if err != nil {
				idx.Corrupt++
				continue
			}
			idx.Offsets[name] = off
		}
		it.Close()
		it = txn.NewIterator(badger.IteratorOptions{Prefix: streamPrefix(streamID, streamLongOffset)})
		for it.Rewind(); it.Valid(); it.Next() {
			err := it.Item().Value(func(val []byte) error {
				payload, err := openRecord(val)
				if err != nil {
					return err
				}
				d := decoder{b: payload}
				off := d.uvarint()
				name := d.string()
				if err := d.finish(); err != nil {
					return err
				}
				idx.Offsets[name] = off
				return nil
			})
			if err != nil {
				idx.Corrupt++
				s.log.Warn("skipping corrupt stream offset", zap.Uint64("stream-id", streamID), zap.Error(err))
			}
		}
		return nil
	})
	if err != nil {
		return idx, fmt.Errorf("store: load stream %d: %w", streamID, err)
	}
	return idx, nil
}

// ReadStream reads messages of streamID from the chunk starting at from
// (whole chunks, in order), stopping before limit or once maxBytes of
// chunk data were read (at least one chunk). match, if not nil, is asked
// about each chunk header first: a chunk it refuses is skipped without
// reading its data. fn gets each message with its offset; the slices are
// the caller's to keep. ReadStream returns the offset after the last
// chunk looked at, or limit when it reached the end.
func (s *Store) ReadStream(streamID, from, limit uint64, maxBytes int, match func(*StreamChunk) bool, fn func(off uint64, m StreamMessage)) (uint64, error) {
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return from, ErrClosed
	}
	end := limit
	s.activity.Add(1)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: streamPrefix(streamID, streamChunkHeader), PrefetchValues: false})
		defer it.Close()
		read := 0
		skipped := 0
		for it.Seek(streamKey(streamID, streamChunkHeader, from)); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) != streamKeyLen {
				continue
			}
			first := binary.BigEndian.Uint64(k[10:])
			if first >= limit {
				return nil
			}
			if read >= maxBytes || skipped >= 100000 {
				end = first
				return nil
			}
			var c *StreamChunk
			if err := item.Value(func(val []byte) error {
				var err error
				c, err = decodeChunkHeader(first, val)
				return err
			}); err != nil {
				s.log.Warn("skipping corrupt stream chunk header", zap.Uint64("stream-id", streamID), zap.Uint64("offset", first), zap.Error(err))
				continue
			}
			if match != nil && !match(c) {
				skipped++
				continue
			}
			di, err := txn.Get(streamKey(streamID, streamChunkData, first))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			val, err := di.ValueCopy(nil)
			if err != nil {
				return err
			}
			payload, err := streamData(txn, streamKey(streamID, streamChunkData, first), val)
			read += max(len(val), len(payload))
			if err != nil && !errors.Is(err, ErrCorrupt) {
				return err
			}
			if err != nil {
				s.log.Warn("skipping corrupt stream chunk", zap.Uint64("stream-id", streamID), zap.Uint64("offset", first), zap.Error(err))
				continue
			}
			d := decoder{b: payload}
			for i := uint32(0); i < c.Count && d.err == nil; i++ {
				m := StreamMessage{Exchange: d.string(), RoutingKey: d.string(), Header: d.raw(), Body: d.raw(), Filter: d.string()}
				if d.err == nil {
					fn(first+uint64(i), m)
				}
			}
			if d.err != nil {
				s.log.Warn("corrupt stream chunk", zap.Uint64("stream-id", streamID), zap.Uint64("offset", first))
			}
		}
		return nil
	})
	if err != nil {
		return from, fmt.Errorf("store: read stream %d: %w", streamID, err)
	}
	return end, nil
}

// RemoveStream deletes every record of streamID, durably. It first waits for
// what was submitted before it.
func (s *Store) RemoveStream(streamID uint64) error {
	return s.removeAll(streamPrefix(streamID, 0), "stream", streamID)
}

// streamData is the payload of a stream chunk's data record val (under
// key): the record's own, or, for data kept in chunk records, those put
// together (readBody).
func streamData(txn *badger.Txn, key, val []byte) ([]byte, error) {
	version, payload, err := openAnyRecord(val)
	if err != nil {
		return nil, err
	}
	switch version {
	case formatVersion:
		return payload, nil
	case formatChunked:
		d := decoder{b: payload}
		c := chunking{bodyLen: d.uvarint(), chunkLen: d.uvarint()}
		if err := d.finish(); err != nil {
			return nil, err
		}
		return readBody(txn, key, c)
	}
	return nil, fmt.Errorf("%w: format version %d", ErrCorrupt, version)
}
