package store

import (
	"encoding/binary"
	"testing"
)

type dedupRow struct {
	key     string
	hashed  bool
	expires int64
}

func loadDedupRows(t *testing.T, s *Store, id uint64) []dedupRow {
	t.Helper()
	var rows []dedupRow
	if err := s.LoadDedup(id, func(key []byte, hashed bool, expires int64) {
		rows = append(rows, dedupRow{string(key), hashed, expires})
	}); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestDedupEntries: entries stored by hash are read back as hashes, those
// stored with their key's text (before keys were hashes) as text, and
// each kind is deleted by its own key; other caches are not touched.
func TestDedupEntries(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	var h [16]byte
	copy(h[:], "0123456789abcdef")
	s.PutDedup(7, h, 1234)
	s.PutDedup(8, h, 0)
	// An entry as versions with text keys wrote it: no marker.
	k := append([]byte{prefixDedup}, binary.BigEndian.AppendUint64(nil, 7)...)
	k = append(k, "old-key"...)
	buf, n := encodeSetOp(k, binary.AppendUvarint(nil, 99), nil)
	if err := s.submitWait([]op{{kind: opSet, buf: buf, n: n}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	rows := loadDedupRows(t, s, 7)
	if len(rows) != 2 || rows[0] != (dedupRow{string(h[:]), true, 1234}) || rows[1] != (dedupRow{"old-key", false, 99}) {
		t.Fatalf("cache 7: %+v", rows)
	}
	s.DeleteDedupText(7, []byte("old-key"))
	s.DeleteDedup(7, h)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	if rows := loadDedupRows(t, s, 7); len(rows) != 0 {
		t.Fatalf("cache 7 after deletes: %+v", rows)
	}
	if rows := loadDedupRows(t, s, 8); len(rows) != 1 || rows[0] != (dedupRow{string(h[:]), true, 0}) {
		t.Fatalf("cache 8: %+v", rows)
	}
}
