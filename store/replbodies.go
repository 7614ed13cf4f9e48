package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Bodies of replicated queues. Every member of a data group holds the
// state of the group's quorum queues; beyond a memory budget the body of a
// message is written here, under 'q' id(8) seq(8) where id is ReplID(group,
// queue), and dropped from RAM. These records are this node's copy, beside
// the replicated state: the group's Raft log (entries not yet in a
// snapshot) and its snapshots (which carry the bodies) are what makes them
// durable, so they are written without a sync of their own, and a node
// restoring a snapshot first drops every record of its group
// (RemoveReplGroup) and writes the snapshot's back.

// ReplID is the id of queue queueID (a definition id, below 2^48) of data
// group group (below 2^16) in the key space of replicated bodies.
func ReplID(group, queueID uint64) uint64 { return group<<48 | queueID&(1<<48-1) }

// PutReplBody writes the body of message seq of replicated queue id (a
// ReplID). Like Spill it has no sync of its own and may block on the
// journal backlog; ReadReplBodies and OpenReplView flush first.
func (s *Store) PutReplBody(id, seq uint64, m *Message) {
	var key [msgKeyLen]byte
	putReplKey(key[:], id, seq)
	s.submitAppend(key[:], m, nil, false)
}

// RemoveReplBody deletes the body of message seq of id, batched like
// Remove.
func (s *Store) RemoveReplBody(id, seq uint64) {
	key := make([]byte, msgKeyLen)
	putReplKey(key, id, seq)
	s.submitRemove(key)
}

// RemoveReplBodies deletes every body of replicated queue id, after what
// was submitted before.
func (s *Store) RemoveReplBodies(id uint64) error {
	return s.removeAll(binary.BigEndian.AppendUint64([]byte{prefixRepl}, id), "replicated bodies", id)
}

// RemoveReplGroup deletes the bodies of every queue of data group group,
// after what was submitted before.
func (s *Store) RemoveReplGroup(group uint64) error {
	prefix := binary.BigEndian.AppendUint64([]byte{prefixRepl}, group<<48)[:3]
	return s.removeAll(prefix, "replicated bodies of group", group)
}

// ReadReplBodies is ReadMessages for the bodies of replicated queue id.
func (s *Store) ReadReplBodies(id uint64, seqs []uint64, fn func(seq uint64, m *Message)) error {
	return s.readMessages(prefixRepl, id, seqs, fn)
}

// ReplView is a consistent read of the replicated bodies (a Badger read
// transaction), for a snapshot written while the state goes on changing.
// Close it when done.
type ReplView struct {
	s   *Store
	txn *badger.Txn
}

// OpenReplView waits for everything submitted before it to be written and
// opens a view of the replicated bodies as they are then.
func (s *Store) OpenReplView() (*ReplView, error) {
	s.lifeMu.RLock()
	defer s.lifeMu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	if err := s.Flush(); err != nil {
		return nil, err
	}
	return &ReplView{s: s, txn: s.db.NewTransaction(false)}, nil
}

// Each calls fn with every body of replicated queue id in the view, in seq
// order; fn owns m. A corrupt record is skipped. It stops at fn's first
// error and returns it.
func (v *ReplView) Each(id uint64, fn func(seq uint64, m *Message) error) error {
	v.s.lifeMu.RLock()
	defer v.s.lifeMu.RUnlock()
	if v.s.closed {
		return ErrClosed
	}
	prefix := binary.BigEndian.AppendUint64([]byte{prefixRepl}, id)
	v.s.activity.Add(1)
	it := v.txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		key := it.Item().Key()
		if len(key) != msgKeyLen {
			continue // a chunk of a large body
		}
		seq := binary.BigEndian.Uint64(key[9:])
		val, err := it.Item().ValueCopy(nil)
		if err != nil {
			return fmt.Errorf("store: replicated bodies of %d: %w", id, err)
		}
		m, c, err := decodeMessage(val)
		if err == nil && c.chunkLen > 0 {
			m.Body, err = readBody(v.txn, it.Item().KeyCopy(nil), c)
		}
		if errors.Is(err, ErrCorrupt) {
			continue
		}
		if err != nil {
			return err
		}
		if err := fn(seq, m); err != nil {
			return err
		}
	}
	return nil
}

// Close ends the view.
func (v *ReplView) Close() { v.txn.Discard() }

func putReplKey(b []byte, id, seq uint64) {
	b[0] = prefixRepl
	binary.BigEndian.PutUint64(b[1:9], id)
	binary.BigEndian.PutUint64(b[9:17], seq)
}
