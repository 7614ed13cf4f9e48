package store

import (
	"encoding/binary"

	"github.com/dgraph-io/badger/v4"
)

// Deduplication caches of exchanges with x-cache-persistence=disk:
//
//	'u' exchangeID(8) key     entry of the cache: value uvarint expires (unix ms, 0 = never)
//
// Written and deleted through the journal writer without a sync of their own: an entry
// rides with the next group commit, so a crash may forget the last ones written.

const prefixDedup = 'u'

// maxDedupKey bounds a cache key: a set op holds its key length in one byte.
const maxDedupKey = 255 - 9

func dedupKey(exchange uint64, key string) []byte {
	b := make([]byte, 0, 9+len(key))
	b = append(b, prefixDedup)
	b = binary.BigEndian.AppendUint64(b, exchange)
	return append(b, key...)
}

// PutDedup records key in the cache of exchange, expiring at expires (unix ms, 0 =
// never). It does not wait. Keys over 246 bytes are not stored.
func (s *Store) PutDedup(exchange uint64, key string, expires int64) {
	if len(key) > maxDedupKey {
		return
	}
	k := dedupKey(exchange, key)
	buf, n := encodeSetOp(k, binary.AppendUvarint(nil, uint64(max(expires, 0))), nil)
	s.submit([]op{{kind: opSet, buf: buf, n: n}}, true, false, nil)
}

// DeleteDedup forgets key from the cache of exchange. It does not wait.
func (s *Store) DeleteDedup(exchange uint64, key string) {
	if len(key) > maxDedupKey {
		return
	}
	s.submit([]op{{kind: opDelete, buf: dedupKey(exchange, key)}}, false, false, nil)
}

// LoadDedup calls fn with each entry of the cache of exchange.
func (s *Store) LoadDedup(exchange uint64, fn func(key string, expires int64)) error {
	prefix := dedupKey(exchange, "")
	return s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
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
			fn(string(item.Key()[len(prefix):]), int64(exp))
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
