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

// chunkKey is the key of chunk i of the value under key (a message key, or
// the data key of a stream chunk): key, 'b', i.
func chunkKey(key []byte, i uint32) []byte {
	k := make([]byte, len(key)+1+4)
	copy(k, key)
	k[len(key)] = chunkSuffix
	binary.BigEndian.PutUint32(k[len(key)+1:], i)
	return k
}

// writeAppend sets the records of append op o: chunks first, then the
// message record.
func (w *batchWriter) writeAppend(o *op) error {
	return w.writeChunked(o.buf[:msgKeyLen:msgKeyLen], o.buf[msgKeyLen:], o.n)
}

// writeChunked sets key to val, or when head > 0 sets the chunk records
// that follow the first head bytes of val under chunkKey(key, i) and then
// key to those head bytes.
func (w *batchWriter) writeChunked(key, val []byte, head uint32) error {
	if head == 0 {
		return w.set(key, val)
	}
	rest := val[head:]
	for i := uint32(0); len(rest) > 0; i++ {
		k := min(len(rest), chunkStride)
		if err := w.set(chunkKey(key, i), rest[:k:k]); err != nil {
			return err
		}
		rest = rest[k:]
	}
	return w.set(key, val[:head:head])
}

// chunkCount is the number of chunk records that follow a head of head
// bytes in val (writeChunked).
func chunkCount(val []byte, head uint32) uint32 {
	if head == 0 {
		return 0
	}
	return uint32((len(val) - int(head) + chunkStride - 1) / chunkStride)
}

// chunkWriter writes a payload of a known length into a buffer as the
// chunk records of a chunked value (large.go): each chunk a record header
// and up to bodyChunkLen bytes, so the payload is copied once.
type chunkWriter struct {
	buf  []byte
	left int // bytes of the current chunk still to write
	rec  int // start of the current chunk record in buf
	rest int // payload bytes still to come after the current chunk
}

func newChunkWriter(buf []byte, payloadLen int) *chunkWriter {
	return &chunkWriter{buf: buf, rec: -1, rest: payloadLen}
}

func (w *chunkWriter) write(p []byte) {
	for len(p) > 0 {
		if w.left == 0 {
			w.seal()
			w.left = min(w.rest, bodyChunkLen)
			w.rest -= w.left
			w.rec = len(w.buf)
			w.buf = beginRecord(w.buf)
		}
		k := min(len(p), w.left)
		w.buf = append(w.buf, p[:k]...)
		w.left -= k
		p = p[k:]
	}
}

func (w *chunkWriter) writeBytes(p []byte) {
	var n [binary.MaxVarintLen64]byte
	w.write(binary.AppendUvarint(n[:0], uint64(len(p))))
	w.write(p)
}

func (w *chunkWriter) writeString(s string) {
	var n [binary.MaxVarintLen64]byte
	w.write(binary.AppendUvarint(n[:0], uint64(len(s))))
	w.write([]byte(s))
}

// seal checksums the current chunk record, if any.
func (w *chunkWriter) seal() {
	if w.rec >= 0 {
		sealRecord(w.buf[w.rec:])
		w.rec = -1
	}
}

// finish seals the last chunk and returns the buffer.
func (w *chunkWriter) finish() []byte {
	w.seal()
	return w.buf
}

// deleteChunks deletes the n chunk records of the value under key.
func (w *batchWriter) deleteChunks(key []byte, n uint32) error {
	for i := uint32(0); i < n; i++ {
		if err := w.del(chunkKey(key, i)); err != nil {
			return err
		}
	}
	return nil
}

// noteChunksLocked remembers that the value under key (a message or
// spill key, or a stream chunk's data key) has n chunk records (Remove,
// Unspill and RemoveStreamChunks delete them). Hold mu.
func (s *Store) noteChunksLocked(key []byte, n uint32) {
	if n == 0 {
		return
	}
	if s.chunked == nil {
		s.chunked = make(map[string]uint32)
	}
	if n > s.chunked[string(key)] {
		s.chunked[string(key)] = n
	}
}

// takeChunksLocked forgets and returns the chunk count of the value under
// key (0 if it has none). Hold mu.
func (s *Store) takeChunksLocked(key []byte) uint32 {
	if len(s.chunked) == 0 {
		return 0
	}
	n, ok := s.chunked[string(key)]
	if ok {
		delete(s.chunked, string(key))
	}
	return n
}

// readBody reads the chunked body c of the message under key (or the
// payload of a stream chunk's data) into one buffer. A missing or bad chunk
// wraps ErrCorrupt.
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
			if o.n > 0 {
				v = int(o.n)
			}
		default:
			continue
		}
		if k == 0 || v > maxValueLen {
			return fmt.Errorf("%w: value of %d bytes (at most %d)", ErrTooLarge, v, maxValueLen)
		}
	}
	return nil
}
