package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// SegmentLog is an ordered log of entries kept in append-only segment files
// of its own directory, outside Badger: the log of a data group's Raft node,
// whose entries carry message bodies. An append is one write and one
// fdatasync of the segment file (no memtable, no value log, no msync), which
// is what a replicated append waits for on every member.
//
// Files (doc.go): DIR/<base>.seg, base the index of its first entry (20
// decimal digits); DIR/first, the log's first index after a prefix deletion
// that kept part of a segment. A segment holds consecutive indexes; the log
// may have gaps between segments (an append past the last index, as after a
// snapshot install, starts a new segment). A segment is a sequence of
// records:
//
//	len(4) crc32c(4) body
//	body: index(8) term(8) type(1) appendedAt(8) dataLen(4) data extLen(4) extensions
//
// The crc covers the body. On open every segment is read through: a record
// cut short or failing its checksum at the end of the last segment (a write
// a crash interrupted: it was never acknowledged) is cut off the file; one
// anywhere else is an error wrapping ErrCorrupt.
//
// Deletions are those a Raft log makes: a prefix (after a snapshot: whole
// segments below the new first index are removed, the first file records a
// cut inside one) and a suffix (on a conflict: the segments above are
// removed, then the one holding the cut is truncated and synced). A prefix
// deletion need not be durable (entries it brings back after a crash are
// committed ones), a suffix deletion is before it returns.
//
// The latest entries appended (up to segCacheBytes of data, segCacheEntries
// entries) are also kept in memory: a Raft node reads each entry back right
// after writing it (the leader to replicate it, every member to apply it),
// and those reads do not touch the files. Append keeps the entries' slices
// for that: the caller must not change them afterwards.
//
// All methods are safe for concurrent use; appends and deletions are
// serialised, reads run beside them.
type SegmentLog struct {
	dir     string
	segSize int64
	noSync  bool

	// wmu serialises appends and deletions; buf (under wmu) is the
	// encoding buffer of appends.
	wmu sync.Mutex
	buf []byte
	// mu guards segs, first and the cache; readers hold it shared while
	// they read a file, so no file is closed under them.
	mu     sync.RWMutex
	segs   []*segment
	first  uint64
	closed bool
	// cache holds the latest entries appended, of consecutive indexes;
	// cacheSize is the length of their data and extensions.
	cache     []LogEntry
	cacheSize int
	// staged are entries of consecutive indexes readable before they are
	// appended (Stage): a Raft leader sends them to its followers while
	// it writes them.
	staged []LogEntry
}

const (
	segCacheBytes   = 1 << 20
	segCacheEntries = 512
	// segBufKeep is the largest encoding buffer an append keeps for the
	// next.
	segBufKeep = 1 << 20
)

// cacheAdd adds entries (consecutive, following any cached) to the cache
// and evicts the oldest beyond its bounds. Hold mu.
func (l *SegmentLog) cacheAdd(entries []LogEntry) {
	if n := len(l.cache); n > 0 && l.cache[n-1].Index+1 != entries[0].Index {
		l.cacheDropFrom(0)
	}
	for i := range entries {
		l.cache = append(l.cache, entries[i])
		l.cacheSize += len(entries[i].Data) + len(entries[i].Extensions)
	}
	k := 0
	for k < len(l.cache) && (l.cacheSize > segCacheBytes || len(l.cache)-k > segCacheEntries) {
		l.cacheSize -= len(l.cache[k].Data) + len(l.cache[k].Extensions)
		l.cache[k] = LogEntry{}
		k++
	}
	l.cache = l.cache[k:]
}

// cacheDropFrom drops the cached entries from index on (all with 0).
// Hold mu.
func (l *SegmentLog) cacheDropFrom(index uint64) {
	for n := len(l.cache); n > 0 && l.cache[n-1].Index >= index; n-- {
		l.cacheSize -= len(l.cache[n-1].Data) + len(l.cache[n-1].Extensions)
		l.cache[n-1] = LogEntry{}
		l.cache = l.cache[:n-1]
	}
}

// cacheDropBelow drops the cached entries below index. Hold mu.
func (l *SegmentLog) cacheDropBelow(index uint64) {
	k := 0
	for k < len(l.cache) && l.cache[k].Index < index {
		l.cacheSize -= len(l.cache[k].Data) + len(l.cache[k].Extensions)
		l.cache[k] = LogEntry{}
		k++
	}
	l.cache = l.cache[k:]
}

type segment struct {
	base uint64
	f    *os.File
	// offs[i] is the offset of entry base+i's record; size is the file's
	// length (where the next record goes).
	offs []int64
	size int64
}

func (s *segment) last() uint64 { return s.base + uint64(len(s.offs)) - 1 }

// DefaultSegmentSize is the size past which a SegmentLog starts a new
// segment.
const DefaultSegmentSize = 64 << 20

const (
	segRecordHeader = 8
	segBodyFixed    = 8 + 8 + 1 + 8 + 4 + 4
	segSuffix       = ".seg"
	segFirstFile    = "first"
)

var segCRC = crc32.MakeTable(crc32.Castagnoli)

// SegmentLogOptions configures OpenSegmentLog.
type SegmentLogOptions struct {
	// SegmentSize: a segment that has reached it takes no more appends
	// (default DefaultSegmentSize).
	SegmentSize int64
	// NoSync skips fdatasync. For tests only: a crash may lose appends.
	NoSync bool
}

// OpenSegmentLog opens the log in dir, creating dir if needed, and reads
// its segments through.
func OpenSegmentLog(dir string, o SegmentLogOptions) (*SegmentLog, error) {
	if o.SegmentSize <= 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("store: segment log: %w", err)
	}
	l := &SegmentLog{dir: dir, segSize: o.SegmentSize, noSync: o.NoSync}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: segment log: %w", err)
	}
	var bases []uint64
	for _, n := range names {
		name := n.Name()
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		b, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil {
			continue
		}
		bases = append(bases, b)
	}
	slices.Sort(bases)
	for i, b := range bases {
		s, err := l.openSegment(b, i == len(bases)-1)
		if err != nil {
			l.closeFiles()
			return nil, err
		}
		if len(s.offs) == 0 && i < len(bases)-1 {
			// An empty segment left by a crash right after its creation,
			// before a suffix deletion removed it: nothing to keep.
			s.f.Close()
			if err := os.Remove(l.segPath(b)); err != nil {
				l.closeFiles()
				return nil, fmt.Errorf("store: segment log: %w", err)
			}
			continue
		}
		if n := len(l.segs); n > 0 && len(s.offs) > 0 && l.segs[n-1].last() >= s.base {
			s.f.Close()
			l.closeFiles()
			return nil, fmt.Errorf("store: segment log %s: segment %d overlaps the one before: %w", dir, b, ErrCorrupt)
		}
		l.segs = append(l.segs, s)
	}
	if raw, err := os.ReadFile(filepath.Join(dir, segFirstFile)); err == nil && len(raw) == 8 {
		l.first = binary.BigEndian.Uint64(raw)
	}
	l.fixFirst()
	return l, nil
}

func (l *SegmentLog) segPath(base uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("%020d%s", base, segSuffix))
}

// openSegment reads segment base through; in the last segment a bad tail
// is cut off.
func (l *SegmentLog) openSegment(base uint64, last bool) (*segment, error) {
	path := l.segPath(base)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("store: segment log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: segment log: %w", err)
	}
	s := &segment{base: base, f: f}
	size := st.Size()
	var hdr [segRecordHeader]byte
	var body []byte
	off := int64(0)
	bad := ""
	for off < size {
		if size-off < segRecordHeader {
			bad = "a record header cut short"
			break
		}
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			f.Close()
			return nil, fmt.Errorf("store: segment log %s: %w", path, err)
		}
		n := int64(binary.BigEndian.Uint32(hdr[0:]))
		if n < segBodyFixed || off+segRecordHeader+n > size {
			bad = "a record cut short"
			break
		}
		body = slices.Grow(body[:0], int(n))[:n]
		if _, err := f.ReadAt(body, off+segRecordHeader); err != nil {
			f.Close()
			return nil, fmt.Errorf("store: segment log %s: %w", path, err)
		}
		if crc32.Checksum(body, segCRC) != binary.BigEndian.Uint32(hdr[4:]) {
			bad = "a record failing its checksum"
			break
		}
		if idx := binary.BigEndian.Uint64(body); idx != base+uint64(len(s.offs)) {
			bad = fmt.Sprintf("entry %d where %d belongs", idx, base+uint64(len(s.offs)))
			break
		}
		s.offs = append(s.offs, off)
		off += segRecordHeader + n
	}
	if bad != "" {
		if !last {
			f.Close()
			return nil, fmt.Errorf("store: segment log %s: %s at offset %d: %w", path, bad, off, ErrCorrupt)
		}
		// A write the crash cut off: it was never acknowledged.
		if err := f.Truncate(off); err != nil {
			f.Close()
			return nil, fmt.Errorf("store: segment log %s: %w", path, err)
		}
		if err := l.sync(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("store: segment log %s: %w", path, err)
		}
	}
	s.size = off
	return s, nil
}

// fixFirst makes first the first index present (0 when empty): at least
// the first segment's base, skipping gaps. Hold mu (or own l).
func (l *SegmentLog) fixFirst() {
	for len(l.segs) > 0 {
		s := l.segs[0]
		if len(s.offs) > 0 && l.first <= s.last() {
			l.first = max(l.first, s.base)
			return
		}
		if len(l.segs) == 1 {
			break
		}
		// Wholly below first (or empty): the caller removes such
		// segments; at open they are only skipped.
		l.segs[0].f.Close()
		os.Remove(l.segPath(s.base))
		l.segs = l.segs[1:]
	}
	if len(l.segs) == 0 || len(l.segs[0].offs) == 0 {
		l.first = 0
		return
	}
	if l.first > l.segs[0].last() || l.first < l.segs[0].base {
		l.first = l.segs[0].base
	}
}

func (l *SegmentLog) sync(f *os.File) error {
	if l.noSync {
		return nil
	}
	return unix.Fdatasync(int(f.Fd()))
}

func (l *SegmentLog) syncDir() error {
	if l.noSync {
		return nil
	}
	d, err := os.Open(l.dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	d.Close()
	return err
}

func (l *SegmentLog) closeFiles() {
	for _, s := range l.segs {
		s.f.Close()
	}
	l.segs = nil
}

// Close closes the log's files.
func (l *SegmentLog) Close() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeFiles()
	l.closed = true
	l.cacheDropFrom(0)
	l.staged = nil
	return nil
}

// Bounds returns the first and last index of the log's entries, both 0 when
// it has none.
func (l *SegmentLog) Bounds() (first, last uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.boundsLocked()
}

func (l *SegmentLog) boundsLocked() (first, last uint64) {
	if len(l.segs) == 0 {
		return 0, 0
	}
	t := l.segs[len(l.segs)-1]
	if len(t.offs) == 0 {
		if len(l.segs) == 1 {
			return 0, 0
		}
		t = l.segs[len(l.segs)-2]
	}
	return l.first, t.last()
}

// find returns the segment holding index and the entry's position in it.
// Hold mu.
func (l *SegmentLog) find(index uint64) (*segment, int) {
	if index < l.first || index == 0 {
		return nil, 0
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > index }) - 1
	if i < 0 {
		return nil, 0
	}
	s := l.segs[i]
	p := index - s.base
	if p >= uint64(len(s.offs)) {
		return nil, 0
	}
	return s, int(p)
}

// Stage makes entries (consecutive indexes) readable by Entry before they
// are appended: the Append of the same entries follows, and takes them
// from there (Staged). Entries staged before and not yet appended stay
// staged when these follow them; otherwise they are replaced. Bounds does
// not count staged entries.
func (l *SegmentLog) Stage(entries []LogEntry) {
	if len(entries) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.staged); n > 0 && l.staged[n-1].Index+1 == entries[0].Index {
		l.staged = append(l.staged, entries...)
		return
	}
	l.staged = append(l.staged[:0:0], entries...)
}

// Staged returns the staged entries from index first on, n of them, when
// they are all staged.
func (l *SegmentLog) Staged(first uint64, n int) ([]LogEntry, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if len(l.staged) == 0 || first < l.staged[0].Index {
		return nil, false
	}
	p := int(first - l.staged[0].Index)
	if p+n > len(l.staged) {
		return nil, false
	}
	return l.staged[p : p+n : p+n], true
}

// unstage drops the staged entries from index from on (an append of them
// failed, or replaced them), and those below upTo (appended). Hold mu.
func (l *SegmentLog) unstage(from, upTo uint64) {
	k := 0
	for k < len(l.staged) && l.staged[k].Index < upTo {
		k++
	}
	n := len(l.staged)
	for n > k && l.staged[n-1].Index >= from {
		n--
	}
	if k >= n {
		l.staged = nil
		return
	}
	l.staged = l.staged[k:n]
}

// Entry returns the entry at index, or ErrNotFound.
func (l *SegmentLog) Entry(index uint64) (LogEntry, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n := len(l.staged); n > 0 && index >= l.staged[0].Index && index <= l.staged[n-1].Index {
		return l.staged[index-l.staged[0].Index], nil
	}
	if n := len(l.cache); n > 0 && index >= l.cache[0].Index && index <= l.cache[n-1].Index {
		return l.cache[index-l.cache[0].Index], nil
	}
	s, p := l.find(index)
	if s == nil {
		return LogEntry{}, ErrNotFound
	}
	end := s.size
	if p+1 < len(s.offs) {
		end = s.offs[p+1]
	}
	rec := make([]byte, end-s.offs[p])
	if _, err := s.f.ReadAt(rec, s.offs[p]); err != nil && !errors.Is(err, io.EOF) {
		return LogEntry{}, fmt.Errorf("store: segment log %s: entry %d: %w", l.dir, index, err)
	}
	e, err := decodeSegRecord(rec)
	if err != nil || e.Index != index {
		return LogEntry{}, fmt.Errorf("store: segment log %s: entry %d: %w", l.dir, index, ErrCorrupt)
	}
	return e, nil
}

func decodeSegRecord(rec []byte) (LogEntry, error) {
	if len(rec) < segRecordHeader+segBodyFixed {
		return LogEntry{}, ErrCorrupt
	}
	n := binary.BigEndian.Uint32(rec)
	body := rec[segRecordHeader:]
	if uint32(len(body)) != n || crc32.Checksum(body, segCRC) != binary.BigEndian.Uint32(rec[4:]) {
		return LogEntry{}, ErrCorrupt
	}
	e := LogEntry{
		Index:      binary.BigEndian.Uint64(body),
		Term:       binary.BigEndian.Uint64(body[8:]),
		Type:       body[16],
		AppendedAt: int64(binary.BigEndian.Uint64(body[17:])),
	}
	dl := int(binary.BigEndian.Uint32(body[25:]))
	if 29+dl+4 > len(body) {
		return LogEntry{}, ErrCorrupt
	}
	if dl > 0 {
		e.Data = body[29 : 29+dl : 29+dl]
	}
	rest := body[29+dl:]
	xl := int(binary.BigEndian.Uint32(rest))
	if 4+xl != len(rest) {
		return LogEntry{}, ErrCorrupt
	}
	if xl > 0 {
		e.Extensions = rest[4:]
	}
	return e, nil
}

func appendSegRecord(b []byte, e *LogEntry) []byte {
	n := segBodyFixed + len(e.Data) + len(e.Extensions)
	start := len(b)
	b = slices.Grow(b, segRecordHeader+n)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint64(b, e.Index)
	b = binary.BigEndian.AppendUint64(b, e.Term)
	b = append(b, e.Type)
	b = binary.BigEndian.AppendUint64(b, uint64(e.AppendedAt))
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Data)))
	b = append(b, e.Data...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Extensions)))
	b = append(b, e.Extensions...)
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(b[start+segRecordHeader:], segCRC))
	return b
}

// Append adds entries, whose indexes must increase, and returns once they
// are synced. An append at or below the last index replaces the entries
// from there on (a suffix deletion first); one past the last index + 1, or
// into an empty log, starts a new segment (as does a gap inside entries).
func (l *SegmentLog) Append(entries []LogEntry) error {
	if len(entries) == 0 {
		return nil
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].Index <= entries[i-1].Index {
			return fmt.Errorf("store: segment log %s: append of indexes %d then %d", l.dir, entries[i-1].Index, entries[i].Index)
		}
	}
	if entries[0].Index == 0 {
		return fmt.Errorf("store: segment log %s: append of index 0", l.dir)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	for len(entries) > 0 {
		n := 1
		for n < len(entries) && entries[n].Index == entries[n-1].Index+1 {
			n++
		}
		if err := l.appendRun(entries[:n]); err != nil {
			l.DropStaged(entries[0].Index)
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// appendRun appends entries of consecutive indexes. Hold wmu.
func (l *SegmentLog) appendRun(entries []LogEntry) error {
	l.mu.RLock()
	first, last := l.boundsLocked()
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	idx := entries[0].Index
	if last != 0 && idx <= last {
		if idx <= first {
			if err := l.deleteLocked(first, last); err != nil {
				return err
			}
		} else if err := l.deleteLocked(idx, last); err != nil {
			return err
		}
		first, last = l.Bounds()
	}
	buf := l.buf[:0]
	offs := make([]int64, len(entries))
	for i := range entries {
		offs[i] = int64(len(buf))
		buf = appendSegRecord(buf, &entries[i])
	}
	if cap(buf) <= segBufKeep {
		l.buf = buf
	} else {
		l.buf = nil
	}
	l.mu.Lock()
	var tail *segment
	if n := len(l.segs); n > 0 {
		tail = l.segs[n-1]
		if len(tail.offs) == 0 && tail.base != idx {
			// An empty segment an append that failed made for
			// another index.
			tail.f.Close()
			os.Remove(l.segPath(tail.base))
			l.segs = l.segs[:n-1]
			tail = nil
			if n > 1 {
				tail = l.segs[n-2]
			}
		}
	}
	l.mu.Unlock()
	fresh := tail == nil || tail.size >= l.segSize || last == 0 || idx != last+1
	if tail != nil && len(tail.offs) == 0 {
		fresh = false // an empty segment made for this very index
	}
	if fresh {
		s, err := l.newSegment(idx)
		if err != nil {
			return err
		}
		tail = s
	}
	if _, err := tail.f.WriteAt(buf, tail.size); err != nil {
		// Leave no partial record for the next append to follow.
		_ = tail.f.Truncate(tail.size)
		return fmt.Errorf("store: segment log %s: %w", l.dir, err)
	}
	if err := l.sync(tail.f); err != nil {
		_ = tail.f.Truncate(tail.size)
		return fmt.Errorf("store: segment log %s: %w", l.dir, err)
	}
	l.mu.Lock()
	l.unstage(math.MaxUint64, entries[len(entries)-1].Index+1)
	for _, o := range offs {
		tail.offs = append(tail.offs, tail.size+o)
	}
	tail.size += int64(len(buf))
	if l.first == 0 {
		l.first = idx
	}
	l.cacheAdd(entries)
	l.mu.Unlock()
	return nil
}

// DropStaged drops the staged entries from index on (Append does after
// failing to append them).
func (l *SegmentLog) DropStaged(index uint64) {
	l.mu.Lock()
	l.unstage(index, 0)
	l.mu.Unlock()
}

// newSegment creates an empty segment for index base and adds it last.
// Hold wmu.
func (l *SegmentLog) newSegment(base uint64) (*segment, error) {
	l.mu.RLock()
	empty := len(l.segs) == 0 || (len(l.segs) == 1 && len(l.segs[0].offs) == 0)
	l.mu.RUnlock()
	if empty {
		// A log starting again (at any index): no segment left.
		l.dropAll()
	}
	f, err := os.OpenFile(l.segPath(base), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("store: segment log: %w", err)
	}
	if err := l.syncDir(); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: segment log: %w", err)
	}
	s := &segment{base: base, f: f}
	l.mu.Lock()
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	return s, nil
}

// DeleteRange deletes the entries from index min to index max (both
// included): a prefix (min at or below the first index) or a suffix (max at
// or above the last), or all of them. A range strictly inside the log is
// refused.
func (l *SegmentLog) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.RLock()
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return l.deleteLocked(min, max)
}

func (l *SegmentLog) deleteLocked(min, max uint64) error {
	first, last := l.Bounds()
	if last == 0 || max < first || min > last {
		return nil
	}
	switch {
	case min <= first && max >= last:
		l.dropAll()
		os.Remove(filepath.Join(l.dir, segFirstFile))
		if err := l.syncDir(); err != nil {
			return fmt.Errorf("store: segment log %s: %w", l.dir, err)
		}
		return nil
	case min <= first:
		return l.deletePrefix(max + 1)
	case max >= last:
		return l.deleteSuffix(min)
	}
	return fmt.Errorf("store: segment log %s: deletion of %d–%d inside %d–%d", l.dir, min, max, first, last)
}

// dropAll removes every segment. Hold wmu.
func (l *SegmentLog) dropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		s.f.Close()
		os.Remove(l.segPath(s.base))
	}
	l.segs = nil
	l.first = 0
	l.cacheDropFrom(0)
	l.staged = nil
}

// deletePrefix makes from the first index: segments wholly below it are
// removed, a cut inside one is recorded in the first file. Hold wmu.
func (l *SegmentLog) deletePrefix(from uint64) error {
	l.mu.Lock()
	var gone []*segment
	for len(l.segs) > 1 && l.segs[0].last() < from {
		gone = append(gone, l.segs[0])
		l.segs = l.segs[1:]
	}
	l.first = from
	l.fixFirst()
	first := l.first
	l.cacheDropBelow(first)
	cut := len(l.segs) > 0 && first > l.segs[0].base
	l.mu.Unlock()
	for _, s := range gone {
		s.f.Close()
		if err := os.Remove(l.segPath(s.base)); err != nil {
			return fmt.Errorf("store: segment log %s: %w", l.dir, err)
		}
	}
	p := filepath.Join(l.dir, segFirstFile)
	if !cut {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: segment log %s: %w", l.dir, err)
		}
		return nil
	}
	// Not synced: after a crash the first index may be an older one,
	// whose entries are committed ones.
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, binary.BigEndian.AppendUint64(nil, first), 0o640); err != nil {
		return fmt.Errorf("store: segment log %s: %w", l.dir, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("store: segment log %s: %w", l.dir, err)
	}
	return nil
}

// deleteSuffix deletes the entries from index from on, durably: the
// segments that start at or above it are removed first (the directory
// synced), then the one holding from is cut and synced, so that a crash
// between leaves a shorter suffix deleted, never a gap. Hold wmu.
func (l *SegmentLog) deleteSuffix(from uint64) error {
	l.mu.Lock()
	// The cache first: an entry from there on is never read again, even
	// if the deletion fails half way.
	l.cacheDropFrom(from)
	l.unstage(from, 0)
	var gone []*segment
	for len(l.segs) > 0 && l.segs[len(l.segs)-1].base >= from {
		gone = append(gone, l.segs[len(l.segs)-1])
		l.segs = l.segs[:len(l.segs)-1]
	}
	var cut *segment
	if n := len(l.segs); n > 0 && from <= l.segs[n-1].last() {
		cut = l.segs[n-1]
	}
	l.mu.Unlock()
	for _, s := range gone {
		s.f.Close()
		if err := os.Remove(l.segPath(s.base)); err != nil {
			return fmt.Errorf("store: segment log %s: %w", l.dir, err)
		}
	}
	if len(gone) > 0 {
		if err := l.syncDir(); err != nil {
			return fmt.Errorf("store: segment log %s: %w", l.dir, err)
		}
	}
	if cut != nil {
		p := int(from - cut.base)
		at := cut.offs[p]
		if err := cut.f.Truncate(at); err != nil {
			return fmt.Errorf("store: segment log %s: %w", l.dir, err)
		}
		if err := l.sync(cut.f); err != nil {
			return fmt.Errorf("store: segment log %s: %w", l.dir, err)
		}
		l.mu.Lock()
		cut.offs = cut.offs[:p]
		cut.size = at
		l.mu.Unlock()
	}
	l.mu.Lock()
	if len(l.segs) == 0 || (len(l.segs) == 1 && len(l.segs[0].offs) == 0) {
		l.first = 0
	}
	l.mu.Unlock()
	return nil
}

// Remove closes the log and deletes its directory.
func (l *SegmentLog) Remove() error {
	l.Close()
	return os.RemoveAll(l.dir)
}
