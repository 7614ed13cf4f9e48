package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Ordered logs. A store holds any number of logs, each named by a uint64 id
// (one per replication group): entries by index, and a few durable values
// (the term and vote a Raft node keeps). Keys (doc.go):
//
//	'r' logID(8) 'e' index(8)           entry
//	'r' logID(8) 'e' index(8) 'b' i(4)  chunk i of that entry's data, when over 4 MiB
//	'r' logID(8) 'v' key                value of key
//
// Every write goes through the journal writer, in the same group commits as
// messages: many logs and many queues, one sync per batch.
const (
	prefixLog    = 'r'
	logEntryKind = 'e'
	logValueKind = 'v'
	logKeyLen    = 1 + 8 + 1 + 8
	// MaxLogValueKey is the longest key of a log value (SetValue): a key of
	// the journal's set op is at most 255 bytes.
	MaxLogValueKey = 255 - (1 + 8 + 1)
)

// ErrLogValueKey is returned for a log value key that is empty or longer
// than MaxLogValueKey.
var ErrLogValueKey = errors.New("store: bad log value key")

// LogEntry is one entry of an ordered log: enough to carry a Raft log entry.
// Entries read back own their slices.
type LogEntry struct {
	Index uint64
	Term  uint64
	Type  uint8
	// Data is the entry's payload, of any length: over 4 MiB it is kept in
	// chunk records (large.go).
	Data []byte
	// Extensions is opaque metadata kept beside Data (Raft's Log.Extensions).
	Extensions []byte
	// AppendedAt is when the entry was first appended (unix nanoseconds, 0 if
	// unknown).
	AppendedAt int64
}

// Log is one ordered log of a store, named by its id. A Log is a handle: it
// holds no state of its own, any number of them may name the same log, and all
// methods are safe for concurrent use. Changes of one log (Append, DeleteRange)
// are applied in the order they are submitted; the caller orders them (a Raft
// node does).
//
// Reads see what the journal writer has written, which includes every Append
// and DeleteRange that has completed.
type Log struct {
	s  *Store
	id uint64
}

// Log returns the handle of log id. It does no I/O.
func (s *Store) Log(id uint64) *Log { return &Log{s: s, id: id} }

// ID is the log's id.
func (l *Log) ID() uint64 { return l.id }

func logEntryKey(id, index uint64) []byte {
	b := make([]byte, logKeyLen)
	b[0] = prefixLog
	binary.BigEndian.PutUint64(b[1:9], id)
	b[9] = logEntryKind
	binary.BigEndian.PutUint64(b[10:18], index)
	return b
}

func logPrefix(id uint64, kind byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{prefixLog}, id)
	if kind != 0 {
		b = append(b, kind)
	}
	return b
}

// encodeSetOp returns the buffer of a set op (len(key), key, value) whose value
// is a record of fields followed by data, and the op's n. Data over
// bodyChunkLen goes into chunk records: the record (format formatChunked) then
// ends with uvarint data length and uvarint chunk length instead of the data,
// and n is its length (writeChunked).
func encodeSetOp(key, fields, data []byte) ([]byte, uint32) {
	if len(data) <= bodyChunkLen {
		buf := make([]byte, 0, 1+len(key)+recordHeaderLen+len(fields)+len(data))
		buf = append(append(buf, byte(len(key))), key...)
		start := len(buf)
		buf = append(append(beginRecord(buf), fields...), data...)
		sealRecord(buf[start:])
		return buf, 0
	}
	n := (len(data) + bodyChunkLen - 1) / bodyChunkLen
	buf := make([]byte, 0, 1+len(key)+recordHeaderLen+len(fields)+2*binary.MaxVarintLen64+n*recordHeaderLen+len(data))
	buf = append(append(buf, byte(len(key))), key...)
	start := len(buf)
	buf = append(buf, formatChunked, 0, 0, 0, 0)
	buf = append(buf, fields...)
	buf = binary.AppendUvarint(buf, uint64(len(data)))
	buf = binary.AppendUvarint(buf, bodyChunkLen)
	sealRecord(buf[start:])
	head := uint32(len(buf) - start)
	for len(data) > 0 {
		k := min(len(data), bodyChunkLen)
		start = len(buf)
		buf = append(beginRecord(buf), data[:k]...)
		sealRecord(buf[start:])
		data = data[k:]
	}
	return buf, head
}

// readChunkedValue decodes the record val of key written by encodeSetOp: it
// hands the fields to fields (which leaves the decoder after them) and
// returns the data, aliasing val (which must be the caller's) or read from its
// chunk records.
func readChunkedValue(txn *badger.Txn, key, val []byte, fields func(d *decoder)) ([]byte, error) {
	version, payload, err := openAnyRecord(val)
	if err != nil {
		return nil, err
	}
	d := decoder{b: payload}
	if fields != nil {
		fields(&d)
	}
	switch version {
	case formatVersion:
		if d.err != nil {
			return nil, d.finish()
		}
		return d.b, nil
	case formatChunked:
		c := chunking{bodyLen: d.uvarint(), chunkLen: d.uvarint()}
		if err := d.finish(); err != nil {
			return nil, err
		}
		return readBody(txn, key, c)
	}
	return nil, fmt.Errorf("%w: format version %d", ErrCorrupt, version)
}

// entryOp is the set op of e in log id.
func entryOp(id uint64, e *LogEntry) op {
	fields := make([]byte, 0, 3*binary.MaxVarintLen64+1+len(e.Extensions))
	fields = binary.AppendUvarint(fields, e.Term)
	fields = append(fields, e.Type)
	fields = binary.AppendVarint(fields, e.AppendedAt)
	fields = appendBytes(fields, e.Extensions)
	buf, n := encodeSetOp(logEntryKey(id, e.Index), fields, e.Data)
	return op{kind: opSet, buf: buf, n: n, withNext: true}
}

// Append writes entries (in the order given, normally of increasing index; an
// entry overwrites one of the same index) in the journal's group commit, with
// the same backpressure as message appends. The entries are encoded before it
// returns, so the caller may reuse them at once.
//
// done, if not nil, runs exactly once: on the writer goroutine once every entry
// is durable (fsynced unless Config.NoSync) with nil, or with the write error;
// or on the caller's goroutine with ErrClosed after Close, or with ErrTooLarge
// (nothing written) for an entry whose Extensions Badger would refuse. On a
// write error the entries written, if any, are a prefix of entries. done must be
// quick and must not call the store: the writer waits for it.
func (l *Log) Append(entries []LogEntry, done func(error)) {
	if len(entries) == 0 {
		if done != nil {
			done(nil)
		}
		return
	}
	ops := make([]op, len(entries))
	for i := range entries {
		ops[i] = entryOp(l.id, &entries[i])
	}
	last := &ops[len(ops)-1]
	last.withNext, last.done = false, done
	l.s.submit(ops, true, true, done)
}

// AppendWait is Append that waits for the entries to be durable and returns
// done's error.
func (l *Log) AppendWait(entries []LogEntry) error {
	ch := make(chan error, 1)
	l.Append(entries, func(err error) { ch <- err })
	return <-ch
}

// Entry reads the entry at index. It returns ErrNotFound if there is none and
// an error wrapping ErrCorrupt if its record is bad.
func (l *Log) Entry(index uint64) (LogEntry, error) {
	var e LogEntry
	err := l.s.view(func(txn *badger.Txn) error {
		key := logEntryKey(l.id, index)
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		e, err = decodeEntry(txn, index, item)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return e, ErrNotFound
	}
	if err != nil {
		return e, fmt.Errorf("store: log %d entry %d: %w", l.id, index, err)
	}
	return e, nil
}

// decodeEntry decodes the entry record of item (whose key is the entry's).
func decodeEntry(txn *badger.Txn, index uint64, item *badger.Item) (LogEntry, error) {
	e := LogEntry{Index: index}
	val, err := item.ValueCopy(nil)
	if err != nil {
		return e, err
	}
	e.Data, err = readChunkedValue(txn, item.Key(), val, func(d *decoder) {
		e.Term = d.uvarint()
		if len(d.b) < 1 {
			d.fail()
		} else {
			e.Type, d.b = d.b[0], d.b[1:]
		}
		e.AppendedAt = d.varint()
		e.Extensions = d.bytes()
	})
	if len(e.Data) == 0 {
		e.Data = nil
	}
	return e, err
}

// Entries calls fn with each entry from index from to index to (both
// included) in index order, skipping indexes that have no entry. An error from
// fn stops the walk and is returned as is; a corrupt entry stops it with an
// error wrapping ErrCorrupt. The entry belongs to fn.
func (l *Log) Entries(from, to uint64, fn func(e *LogEntry) error) error {
	var fnErr error
	err := l.s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: logPrefix(l.id, logEntryKind)})
		defer it.Close()
		for it.Seek(logEntryKey(l.id, from)); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) != logKeyLen {
				continue // a chunk, read with its entry
			}
			index := binary.BigEndian.Uint64(k[10:])
			if index > to {
				return nil
			}
			e, err := decodeEntry(txn, index, item)
			if err != nil {
				return fmt.Errorf("entry %d: %w", index, err)
			}
			if fnErr = fn(&e); fnErr != nil {
				return fnErr
			}
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("store: log %d: %w", l.id, err)
	}
	return nil
}

// Bounds returns the first and last index of the log's entries, both 0 when it
// has none.
func (l *Log) Bounds() (first, last uint64, err error) {
	err = l.s.view(func(txn *badger.Txn) error {
		prefix := logPrefix(l.id, logEntryKind)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		for it.Rewind(); it.Valid(); it.Next() {
			if k := it.Item().Key(); len(k) == logKeyLen {
				first = binary.BigEndian.Uint64(k[10:])
				break
			}
		}
		it.Close()
		if first == 0 {
			return nil
		}
		it = txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true})
		defer it.Close()
		for it.Seek(append(prefix, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)); it.Valid(); it.Next() {
			if k := it.Item().Key(); len(k) == logKeyLen {
				last = binary.BigEndian.Uint64(k[10:])
				break
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("store: log %d bounds: %w", l.id, err)
	}
	return first, last, nil
}

// DeleteRange deletes the entries from index min to index max (both included),
// durably: it returns once the deletion is synced, in the journal's group
// commit. It is meant for the two truncations a Raft log makes: a prefix (min
// at or below the first index, after a snapshot) and a suffix (max at or above
// the last index, on a conflict). A prefix is deleted from its low end and a
// suffix from its high end, so a deletion cut short by a crash or an error
// leaves the remaining entries contiguous. An entry's record goes before its
// data chunks, so no entry is ever left without its data.
func (l *Log) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	first, _, err := l.Bounds()
	if err != nil {
		return err
	}
	prefix := logPrefix(l.id, logEntryKind)
	start := logEntryKey(l.id, min)
	if min <= first {
		start = prefix // also chunks left behind by a deletion cut short
	}
	var keys [][]byte
	err = l.s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
		defer it.Close()
		for it.Seek(start); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) < logKeyLen || binary.BigEndian.Uint64(k[10:18]) > max {
				break
			}
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: log %d delete range: %w", l.id, err)
	}
	if len(keys) == 0 {
		return nil
	}
	if min > first {
		// A suffix: from the high end, each entry's record before its
		// chunks (which sort after it).
		for i := 0; i < len(keys); {
			j := i + 1
			for j < len(keys) && len(keys[j]) > logKeyLen {
				j++
			}
			// keys[i:j] is one entry and its chunks: put its record last
			// so that reversing the whole list puts it first.
			rec := keys[i]
			copy(keys[i:], keys[i+1:j])
			keys[j-1] = rec
			i = j
		}
		for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
			keys[i], keys[j] = keys[j], keys[i]
		}
	}
	ops := make([]op, len(keys))
	l.s.mu.Lock()
	for i, k := range keys {
		ops[i] = op{kind: opDelete, buf: k, withNext: i < len(keys)-1}
		if len(k) == logKeyLen {
			l.s.takeChunksLocked(k)
		}
	}
	l.s.mu.Unlock()
	return l.s.submitWait(ops)
}

// SetValue stores val under key in the log's values, durably (in the
// journal's group commit). A value of any length is kept (over 4 MiB in chunk
// records). key must be 1 to MaxLogValueKey bytes (ErrLogValueKey).
func (l *Log) SetValue(key, val []byte) error {
	if len(key) == 0 || len(key) > MaxLogValueKey {
		return fmt.Errorf("%w: %d bytes", ErrLogValueKey, len(key))
	}
	k := append(logPrefix(l.id, logValueKind), key...)
	buf, n := encodeSetOp(k, nil, val)
	l.s.mu.Lock()
	// An earlier value's chunks beyond the new one's are not read again;
	// Remove deletes them with the log.
	l.s.takeChunksLocked(k)
	l.s.mu.Unlock()
	return l.s.submitWait([]op{{kind: opSet, buf: buf, n: n}})
}

// Value returns the value stored under key, or ErrNotFound. The slice is the
// caller's.
func (l *Log) Value(key []byte) ([]byte, error) {
	if len(key) == 0 || len(key) > MaxLogValueKey {
		return nil, fmt.Errorf("%w: %d bytes", ErrLogValueKey, len(key))
	}
	k := append(logPrefix(l.id, logValueKind), key...)
	var v []byte
	err := l.s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if err != nil {
			return err
		}
		val, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		v, err = readChunkedValue(txn, k, val, nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: log %d value %q: %w", l.id, key, err)
	}
	return v, nil
}

// SetUint64 stores v under key as 8 big-endian bytes (SetValue).
func (l *Log) SetUint64(key []byte, v uint64) error {
	return l.SetValue(key, binary.BigEndian.AppendUint64(nil, v))
}

// Uint64 returns the value under key stored by SetUint64, ErrNotFound, or an
// error wrapping ErrCorrupt for a value that is not 8 bytes.
func (l *Log) Uint64(key []byte) (uint64, error) {
	v, err := l.Value(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("store: log %d value %q: %w: %d bytes, want 8", l.id, key, ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// Remove deletes every entry and value of the log, durably, after what was
// submitted before it.
func (l *Log) Remove() error {
	return l.s.removeAll(logPrefix(l.id, 0), "log", l.id)
}

// view runs fn in a read transaction, or returns ErrClosed after Close.
func (s *Store) view(fn func(txn *badger.Txn) error) error {
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	// Not counted as activity for the trimmer: these reads (log entries,
	// such as Raft's check of the previous entry on every AppendEntries, and
	// small records) are served from memtables and tables, not message bodies.
	return s.db.View(fn)
}

// submitWait submits ops tied together (each but the last withNext) and
// waits until they are durable, returning their write error.
func (s *Store) submitWait(ops []op) error {
	ch := make(chan error, 1)
	done := func(err error) { ch <- err }
	ops[len(ops)-1].done = done
	s.submit(ops, true, true, done)
	return <-ch
}
