package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Large message bodies. Badger refuses a value over its value-log file size
// (ValueLogFileSize, options.go), so a body of more than bodyChunkLen bytes
// is not kept in its message record: the record (format version
// formatChunked) holds everything but the body and says how long the body is
// and how it is cut, and the body is kept in chunk records of bodyChunkLen
// bytes (the last one shorter) under the message key followed by 'b' and the
// chunk index. Chunk keys sort between the message key and its delivery
// mark. The writer writes a message's chunks before its record, so a record
// is never durable without its chunks; the store remembers which messages
// have chunks (Append, Spill, ScanQueue) so that Remove and Unspill delete
// them too. Readers put the body together again in one buffer: ReadMessage,
// ReadMessages and ScanQueue return whole messages.

const (
	// maxValueLen is the largest value Badger takes: its value-log file
	// size (options.go).
	maxValueLen = 64 << 20
	// bodyChunkLen is the body bytes of one chunk record, and the largest
	// body kept in its message record.
	bodyChunkLen = 4 << 20
	// formatChunked is the record format of a message whose body is in
	// chunk records.
	formatChunked = 2
	chunkSuffix   = 'b'
	chunkKeyLen   = msgKeyLen + 1 + 4
	// chunkStride is the length of every chunk record but the last.
	chunkStride = recordHeaderLen + bodyChunkLen
)

// ErrTooLarge is returned (to done) for a record the store cannot write:
// a value or key over Badger's limits. Such a record fails alone, before
// it joins a group commit.
var ErrTooLarge = errors.New("store: record too large")

// chunking says how a message's body is stored: bodyLen bytes in chunks of
// chunkLen, or in its record when chunkLen is 0.
type chunking struct{ bodyLen, chunkLen uint64 }

// chunks is the number of chunk records.
func (c chunking) chunks() uint64 {
	if c.chunkLen == 0 {
		return 0
	}
	return (c.bodyLen + c.chunkLen - 1) / c.chunkLen
}

// encodeAppend returns the buffer of an append op of m under key (a message
// or spill key): the key, the message record, then for a body over
// bodyChunkLen its chunk records; and the op's n, the length of the record
// when there are chunks (0 otherwise). The body is copied once.
func encodeAppend(key []byte, m *Message) ([]byte, uint32) {
	if len(m.Body) <= bodyChunkLen {
		buf := make([]byte, msgKeyLen, msgKeyLen+encodedMessageLen(m))
		copy(buf, key)
		return appendMessage(buf, m), 0
	}
	n := (len(m.Body) + bodyChunkLen - 1) / bodyChunkLen
	headLen := encodedMessageLen(m) - len(m.Body) + 2*binary.MaxVarintLen64
	buf := make([]byte, msgKeyLen, msgKeyLen+headLen+n*recordHeaderLen+len(m.Body))
	copy(buf, key)
	start := len(buf)
	buf = append(buf, formatChunked, 0, 0, 0, 0)
	buf = appendMessageFields(buf, m)
	buf = binary.AppendUvarint(buf, uint64(len(m.Body)))
	buf = binary.AppendUvarint(buf, bodyChunkLen)
	sealRecord(buf[start:])
	head := uint32(len(buf) - start)
	for body := m.Body; len(body) > 0; {
		k := min(len(body), bodyChunkLen)
		start = len(buf)
		buf = append(beginRecord(buf), body[:k]...)
		sealRecord(buf[start:])
		body = body[k:]
	}
	return buf, head
}

// appendChunks counts the chunk records of an append op.
func appendChunks(o *op) uint32 {
	if o.n == 0 {
		return 0
	}
	rest := len(o.buf) - msgKeyLen - int(o.n)
	return uint32((rest + chunkStride - 1) / chunkStride)
}

// chunkKey is the key of chunk i of the message under msgKey.
func chunkKey(msgKey []byte, i uint32) []byte {
	k := make([]byte, chunkKeyLen)
	copy(k, msgKey[:msgKeyLen])
	k[msgKeyLen] = chunkSuffix
	binary.BigEndian.PutUint32(k[msgKeyLen+1:], i)
	return k
}

// writeAppend sets the records of append op o: chunks first, then the
// message record.
func (w *batchWriter) writeAppend(o *op) error {
	key := o.buf[:msgKeyLen:msgKeyLen]
	if o.n == 0 {
		return w.set(key, o.buf[msgKeyLen:])
	}
	head := msgKeyLen + int(o.n)
	rest := o.buf[head:]
	for i := uint32(0); len(rest) > 0; i++ {
		k := min(len(rest), chunkStride)
		if err := w.set(chunkKey(key, i), rest[:k:k]); err != nil {
			return err
		}
		rest = rest[k:]
	}
	return w.set(key, o.buf[msgKeyLen:head:head])
}

// deleteChunks deletes the n chunk records of the message under key.
func (w *batchWriter) deleteChunks(key []byte, n uint32) error {
	for i := uint32(0); i < n; i++ {
		if err := w.del(chunkKey(key, i)); err != nil {
			return err
		}
	}
	return nil
}

// noteChunksLocked remembers that the message under key has n chunk
// records (Remove deletes them). Hold mu.
func (s *Store) noteChunksLocked(key []byte, n uint32) {
	k := [msgKeyLen]byte(key[:msgKeyLen])
	if s.chunked == nil {
		s.chunked = make(map[[msgKeyLen]byte]uint32)
	}
	if n > s.chunked[k] {
		s.chunked[k] = n
	}
}

// takeChunksLocked forgets and returns the chunk count of the message under
// key (0 if it has none). Hold mu.
func (s *Store) takeChunksLocked(key []byte) uint32 {
	if len(s.chunked) == 0 {
		return 0
	}
	k := [msgKeyLen]byte(key[:msgKeyLen])
	n := s.chunked[k]
	if n > 0 {
		delete(s.chunked, k)
	}
	return n
}

// readBody reads the chunked body c of the message under key into one
// buffer. A missing or bad chunk wraps ErrCorrupt.
func readBody(txn *badger.Txn, key []byte, c chunking) ([]byte, error) {
	if c.chunkLen == 0 || c.chunkLen > maxValueLen || c.bodyLen > 1<<40 {
		return nil, fmt.Errorf("%w: chunked body of %d bytes in chunks of %d", ErrCorrupt, c.bodyLen, c.chunkLen)
	}
	body := make([]byte, c.bodyLen)
	n := c.chunks()
	for i := uint64(0); i < n; i++ {
		item, err := txn.Get(chunkKey(key, uint32(i)))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: chunk %d of %d missing", ErrCorrupt, i, n)
		}
		if err != nil {
			return nil, err
		}
		part := body[i*c.chunkLen : min((i+1)*c.chunkLen, c.bodyLen)]
		err = item.Value(func(val []byte) error {
			payload, err := openRecord(val)
			if err != nil {
				return err
			}
			if len(payload) != len(part) {
				return fmt.Errorf("%w: chunk %d has %d bytes, want %d", ErrCorrupt, i, len(payload), len(part))
			}
			copy(part, payload)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return body, nil
}

// checkOps refuses ops that Badger would refuse, so that they fail alone
// instead of failing the group commit they would join.
func checkOps(ops []op) error {
	for i := range ops {
		o := &ops[i]
		var k, v int
		switch o.kind {
		case opAppend:
			k, v = msgKeyLen, len(o.buf)-msgKeyLen
			if o.n > 0 {
				v = int(o.n)
			}
		case opSet:
			k = int(o.buf[0])
			v = len(o.buf) - 1 - k
		default:
			continue
		}
		if k == 0 || v > maxValueLen {
			return fmt.Errorf("%w: value of %d bytes (at most %d)", ErrTooLarge, v, maxValueLen)
		}
	}
	return nil
}
