package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// Paging. A queue holding more than its memory budget keeps only an index
// in RAM and reads bodies back when consumers approach them: the messages
// of durable queues that are journaled anyway are read from their journal
// records ('m'), and every other message (transient, or of a non-durable
// queue) is first written with Spill under 'p' pageID seq. Spilled records
// belong to the running process only: Open deletes them all, and nothing
// recovers them.

// Spill writes message seq of the queue paged as pageID (an id the caller
// owns for this process's lifetime) so that it can be paged out of RAM. Like
// Remove it has no sync of its own: ReadMessages flushes what is pending
// before it reads. It counts in the journal backlog and may block on it as
// Append does. Dropped after Close.
func (s *Store) Spill(pageID, seq uint64, m *Message) {
	var key [msgKeyLen]byte
	putSpillKey(key[:], pageID, seq)
	s.submitAppend(key[:], m, nil, false)
}

// Unspill deletes spilled message seq of pageID, batched like Remove.
func (s *Store) Unspill(pageID, seq uint64) {
	key := make([]byte, msgKeyLen)
	putSpillKey(key, pageID, seq)
	s.submitRemove(key)
}

// submitRemove deletes the record at key (and its chunks) in the next
// batch, without waiting; dropped after Close. key is kept.
func (s *Store) submitRemove(key []byte) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	wake := s.pushLocked(op{kind: opRemove, buf: key, n: s.takeChunksLocked(key)})
	s.mu.Unlock()
	if wake {
		s.signal()
	}
}

// RemoveSpilled deletes every spilled message of pageID, after what was
// submitted before it.
func (s *Store) RemoveSpilled(pageID uint64) error {
	return s.removeAll(binary.BigEndian.AppendUint64([]byte{prefixSpill}, pageID), "spilled messages", pageID)
}

// ReadMessages pages messages in: for each seq of seqs (ascending) it calls
// fn with message seq of the queue — journal record of durable queue id, or
// with spilled the spilled record of page id — or with nil when there is
// no such record or it is corrupt (logged). It first waits for everything
// submitted before it to be written, so a message appended or spilled
// before the call is found. The Messages belong to fn; delivery counts are
// not read (the caller's index has them).
func (s *Store) ReadMessages(id uint64, spilled bool, seqs []uint64, fn func(seq uint64, m *Message)) error {
	p := byte(prefixMsg)
	if spilled {
		p = prefixSpill
	}
	return s.readMessages(p, id, seqs, fn)
}

// readMessages is ReadMessages of the records under prefix p id(8).
func (s *Store) readMessages(p byte, id uint64, seqs []uint64, fn func(seq uint64, m *Message)) error {
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.Flush(); err != nil {
		return err
	}
	prefix := binary.BigEndian.AppendUint64([]byte{p}, id)
	s.activity.Add(1)
	txn := s.db.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	key := make([]byte, msgKeyLen)
	copy(key, prefix)
	for _, seq := range seqs {
		binary.BigEndian.PutUint64(key[9:], seq)
		if !it.Valid() || !bytes.Equal(it.Item().Key(), key) {
			it.Seek(key)
		}
		if !it.Valid() || !bytes.Equal(it.Item().Key(), key) {
			fn(seq, nil)
			continue
		}
		val, err := it.Item().ValueCopy(nil)
		if err != nil {
			return fmt.Errorf("store: read messages of %d: %w", id, err)
		}
		m, c, err := decodeMessage(val)
		if err == nil && c.chunkLen > 0 {
			m.Body, err = readBody(txn, key, c)
			if err != nil && !errors.Is(err, ErrCorrupt) {
				return fmt.Errorf("store: read messages of %d: %w", id, err)
			}
		}
		if err != nil {
			s.log.Warn("skipping corrupt message", zap.Uint64("queue-id", id), zap.Uint64("seq", seq),
				zap.String("prefix", string(p)), zap.Error(err))
			m = nil
		}
		fn(seq, m)
		it.Next()
	}
	return nil
}

func putSpillKey(b []byte, pageID, seq uint64) {
	b[0] = prefixSpill
	binary.BigEndian.PutUint64(b[1:9], pageID)
	binary.BigEndian.PutUint64(b[9:17], seq)
}
