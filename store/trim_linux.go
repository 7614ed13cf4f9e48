package store

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Badger reads and writes its files through shared memory maps: tables (*.sst), the
// value log (*.vlog, where bodies over the value threshold go) and the memtables' logs
// (*.mem). Every page of them it has written or read stays in the process's resident set
// until the kernel needs the memory, so RSS would grow with every byte ever written (a
// 4 KiB persistent message stream consumed at once grew it by ~30 MB/s) and with every
// table page read (a million queued small messages leave ~100 MB of table pages). The
// trimmer asks the kernel to take these pages out of the process with
// madvise(MADV_PAGEOUT) on the store's shared mappings of those files:
//
//   - every trimLogInterval, value-log and memtable-log mappings: all of a file that is
//     no longer written, and all but the last trimKeepTail bytes below the write tail of
//     the newest file of each kind (its highest page mapped in the process: writes are
//     appends, and what is below was trimmed before), so that the pages being filled are
//     not paged out, and then read back from the disk, on every trim;
//   - every trimTableInterval, table mappings too.
//
// A store with no reads or writes since the last trim is not trimmed, but for its
// tables in the first trimIdleTables seconds after its last activity, and is looked at
// once a trimTableInterval instead of every trimLogInterval: an idle broker costs
// almost no CPU here (one wake-up a second).
//
// MADV_PAGEOUT never discards data, unlike MADV_DONTNEED on a private or anonymous
// mapping: a clean page is dropped from the page cache and read from the file when next
// touched (as a spilled or recovered message's body is when it is read); a dirty page
// (written, not yet synced) is unmapped from the process and stays in the page cache,
// dirty, until writeback, so a write that Badger makes to it at the same moment is not
// lost, and the next write faults it back in from the cache. Should a mapping be
// replaced between reading /proc/self/maps and the call (Badger remaps a log file when
// it grows or truncates it), the worst outcome is memory paged out early; with
// MADV_DONTNEED it could zero an anonymous mapping that took the range. Kernels before
// Linux 5.4 refuse the advice and nothing happens.

const (
	trimLogInterval   = 200 * time.Millisecond
	trimTableInterval = time.Second
	// trimKeepTail is how much of the newest log file below its write tail stays
	// mapped: the last few group commits.
	trimKeepTail = 2 << 20
	// trimIdleTables is how many table trims follow the store's last read
	// or write (compactions go on after writes end).
	trimIdleTables = 10
)

// trimLoop trims the store's mappings until stop: logs every trimLogInterval, tables
// every trimTableInterval. While the store is idle it wakes once a trimTableInterval
// only (an idle broker's timers are most of its idle CPU).
func (s *Store) trimLoop() {
	defer s.wg.Done()
	t := time.NewTimer(trimLogInterval)
	defer t.Stop()
	// An idle store is not searched: the logs' pages do not grow without
	// reads or writes, and the tables' only with the compactions that
	// follow writes, which trimIdleTables table trims after the last
	// activity cover.
	last, lastTables, quiet := int64(-1), int64(-1), 0
	nextTables := time.Now().Add(trimTableInterval)
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		act := s.activity.Load()
		now := time.Now()
		tables := !now.Before(nextTables)
		if tables {
			nextTables = now.Add(trimTableInterval)
			if act != lastTables {
				lastTables, quiet = act, 0
			} else if quiet++; quiet > trimIdleTables {
				tables = false
			}
		}
		// Nothing read or written since the last look: the next is at
		// the next table trim, not in trimLogInterval.
		if act == last {
			t.Reset(max(time.Until(nextTables), trimLogInterval))
		} else {
			t.Reset(trimLogInterval)
		}
		if act == last && !tables {
			continue
		}
		// Close holds lifeMu while it waits for this goroutine: waiting
		// for lifeMu here would deadlock when a tick races the stop. Only
		// Close takes it for writing.
		if !s.lifeMu.TryRLock() {
			continue
		}
		if !s.closed {
			s.trim(tables)
		}
		s.lifeMu.RUnlock()
		last = act
	}
}

// trimMappings asks the kernel to reclaim the resident pages of the store's mappings
// of its tables and logs. Scans that read a lot of tables (removePrefix) call it too.
// Hold lifeMu (read) with the store open.
func (s *Store) trimMappings() { s.trim(true) }

// logMapping is one shared mapping of a value-log or memtable-log file.
type logMapping struct {
	start, end uint64
	kind       int    // 0 value log, 1 memtable log
	num        uint64 // the file's number (Badger's fid), from its name
}

// trim pages out the store's log mappings, and its table mappings with tables.
func (s *Store) trim(tables bool) {
	dir, err := filepath.Abs(s.dir)
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	prefix := []byte(dir + string(filepath.Separator))
	var logs []logMapping
	var newest [2]uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		// start-end perms offset dev inode path: the path is all from the first
		// slash (a file deleted while mapped ends in " (deleted)")
		slash := bytes.IndexByte(line, '/')
		if slash < 0 || !bytes.HasPrefix(line[slash:], prefix) {
			continue
		}
		name := line[slash+len(prefix):]
		kind := -1
		switch {
		case bytes.HasSuffix(name, []byte(".vlog")):
			kind = 0
		case bytes.HasSuffix(name, []byte(".mem")):
			kind = 1
		case !tables || !bytes.HasSuffix(name, []byte(".sst")):
			continue
		}
		dash := bytes.IndexByte(line, '-')
		sp := bytes.IndexByte(line, ' ')
		if dash < 0 || sp < dash || sp+5 > len(line) || line[sp+4] != 's' {
			continue // not a shared mapping: leave it
		}
		start, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
		end, err2 := strconv.ParseUint(string(line[dash+1:sp]), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if kind < 0 {
			pageOut(start, end)
			continue
		}
		num, err := strconv.ParseUint(string(name[:bytes.IndexByte(name, '.')]), 10, 64)
		if err != nil {
			continue
		}
		newest[kind] = max(newest[kind], num)
		logs = append(logs, logMapping{start: start, end: end, kind: kind, num: num})
	}
	var pagemap *os.File
	for _, m := range logs {
		end := m.end
		if m.num == newest[m.kind] {
			if pagemap == nil {
				if pagemap, err = os.Open("/proc/self/pagemap"); err != nil {
					return
				}
				defer pagemap.Close()
			}
			end = mappedEnd(pagemap, m.start, m.end)
			if end < m.start+trimKeepTail {
				continue
			}
			end -= trimKeepTail
		}
		pageOut(m.start, end)
	}
}

// pageOut advises the kernel to reclaim the pages of [start, end).
func pageOut(start, end uint64) {
	if end > start {
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT)
	}
}

// mincoreVecs holds mincore's result vectors between trims (one page a byte: 32 KiB
// for a value-log file).
var mincoreVecs = sync.Pool{New: func() any { return new([]byte) }}

// mappedEnd is the end of the highest page of the mapping [start, end) that is mapped
// in this process (present in /proc/self/pagemap): the write tail of a log file that is
// only appended to, once the pages below it were trimmed. The page cache holds more:
// the kernel reads ahead of faults, holes included, so mincore's answer (the highest
// page in the cache) only bounds the search, which looks at most trimSearch below it.
// It answers end when the mappings cannot be read, so that the whole file is trimmed.
func mappedEnd(pagemap *os.File, start, end uint64) uint64 {
	const trimSearch = 64 << 20
	page := uint64(os.Getpagesize())
	vp := mincoreVecs.Get().(*[]byte)
	defer mincoreVecs.Put(vp)
	if n := int((end - start + page - 1) / page); cap(*vp) < n {
		*vp = make([]byte, n)
	} else {
		*vp = (*vp)[:n]
	}
	vec := *vp
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(start), uintptr(end-start), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return end
	}
	hi := start
	for i := len(vec) - 1; i >= 0; i-- {
		if vec[i]&1 != 0 {
			hi = start + uint64(i+1)*page
			break
		}
	}
	var buf [512 * 8]byte // pagemap entries of 2 MiB of 4 KiB pages
	bottom := start
	if hi > start+trimSearch {
		bottom = hi - trimSearch
	}
	for hi > bottom {
		from := max(bottom, hi-uint64(len(buf)/8)*page)
		n := (hi - from) / page
		if _, err := pagemap.ReadAt(buf[:n*8], int64(from/page*8)); err != nil {
			return end
		}
		for i := int(n) - 1; i >= 0; i-- {
			if binary.LittleEndian.Uint64(buf[i*8:])>>63 != 0 { // present
				return from + uint64(i+1)*page
			}
		}
		hi = from
	}
	return bottom
}
