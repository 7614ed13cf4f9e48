package store

import (
	"encoding/binary"

	"github.com/dgraph-io/badger/v4"
)

// Deduplication caches of exchanges with x-cache-persistence=disk (and of
// queues', under ids of their own):
//
//	'u' exchangeID(8) key     entry of the cache: value uvarint expires (unix ms, 0 = never),
//	                          then dedupHashed when key is a key's 16-byte hash
//
// Entries written before keys were hashes have the key's text and no
// marker (LoadDedup reports them as such). Written and deleted through the
// journal writer without a sync or a wait of their own: an entry rides
// with the next group commit, so a crash may forget the last ones written,
// and a publish never waits for one.

const prefixDedup = 'u'

// dedupHashed marks, after the expiry, an entry whose key is a hash.
const dedupHashed = 'h'

// dedupKeyLen is the length of an entry's key in the store.
const dedupKeyLen = 9 + 16

func putDedupKey(b []byte, exchange uint64, key [16]byte) {
	b[0] = prefixDedup
	binary.BigEndian.PutUint64(b[1:], exchange)
	copy(b[9:], key[:])
}

// PutDedup records key in the cache of exchange, expiring at expires (unix
// ms, 0 = never). It does not wait, for the write or for the journal's
// backlog: the entry is written with the next group commit.
func (s *Store) PutDedup(exchange uint64, key [16]byte, expires int64) {
	var k [dedupKeyLen]byte
	putDedupKey(k[:], exchange, key)
	var v [binary.MaxVarintLen64 + 1]byte
	n := binary.PutUvarint(v[:], uint64(max(expires, 0)))
	v[n] = dedupHashed
	buf, sz := encodeSetOp(k[:], v[:n+1], nil)
	s.submit([]op{{kind: opSet, buf: buf, n: sz}}, false, false, nil)
}

// DeleteDedup forgets key from the cache of exchange. It does not wait.
func (s *Store) DeleteDedup(exchange uint64, key [16]byte) {
	k := make([]byte, dedupKeyLen)
	putDedupKey(k, exchange, key)
	s.submit([]op{{kind: opDelete, buf: k}}, false, false, nil)
}

// DeleteDedupText forgets an entry written with its key's text (LoadDedup
// reports it so). It does not wait.
func (s *Store) DeleteDedupText(exchange uint64, key []byte) {
	k := make([]byte, 0, 9+len(key))
	k = append(k, prefixDedup)
	k = binary.BigEndian.AppendUint64(k, exchange)
	k = append(k, key...)
	s.submit([]op{{kind: opDelete, buf: k}}, false, false, nil)
}

// LoadDedup calls fn with each entry of the cache of exchange: key is its
// 16-byte hash when hashed, else the key's text (an entry written before
// keys were hashes); key is only valid during the call.
func (s *Store) LoadDedup(exchange uint64, fn func(key []byte, hashed bool, expires int64)) error {
	var prefix [9]byte
	prefix[0] = prefixDedup
	binary.BigEndian.PutUint64(prefix[1:], exchange)
	return s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix[:]})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			val, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			data, err := readChunkedValue(txn, nil, val, nil)
			if err != nil {
				continue // corrupt: skipped
			}
			exp, n := binary.Uvarint(data)
			if n <= 0 {
				continue
			}
			key := item.Key()[len(prefix):]
			hashed := len(data) == n+1 && data[n] == dedupHashed && len(key) == 16
			fn(key, hashed, int64(exp))
		}
		return nil
	})
}

// DropDedup deletes the cache entries of every exchange gone reports true for.
func (s *Store) DropDedup(gone func(exchange uint64) bool) error {
	var keys [][]byte
	err := s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixDedup}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) >= 9 && gone(binary.BigEndian.Uint64(k[1:9])) {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := 0; i < len(keys); i += 4096 {
		part := keys[i:min(i+4096, len(keys))]
		ops := make([]op, len(part))
		for j, k := range part {
			ops[j] = op{kind: opDelete, buf: k, withNext: j < len(part)-1}
		}
		if err := s.submitWait(ops); err != nil {
			return err
		}
	}
	return nil
}
