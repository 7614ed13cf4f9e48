package store

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Badger reads its table files through shared memory maps, so every page of them it has
// written or read stays in the process's resident set until the kernel needs the
// memory: a million queued small messages leave ~100 MB of table pages mapped. Every
// trimInterval the trimmer asks the kernel to reclaim them, with madvise(MADV_PAGEOUT)
// on the store's shared mappings of *.sst files: the pages are clean (Badger syncs a
// table before it uses it) and are read again from the file when next touched, as a
// deep queue's messages are when consumers reach them. MADV_PAGEOUT, unlike
// MADV_DONTNEED, never discards data: should a mapping be replaced between reading
// /proc/self/maps and the call, the worst outcome is memory paged out early. Value-log
// and memtable files, written and read at the tail, are left alone. Kernels before
// Linux 5.4 refuse the advice and nothing happens.

const trimInterval = time.Second

// trimLoop trims the store's mappings every trimInterval until stop.
func (s *Store) trimLoop() {
	defer s.wg.Done()
	t := time.NewTicker(trimInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.lifeMu.RLock()
		if !s.closed {
			s.trimMappings()
		}
		s.lifeMu.RUnlock()
	}
}

// trimMappings asks the kernel to reclaim the resident pages of the store's mappings
// of its table files. Scans that read a lot of them (removePrefix) call it too. Hold
// lifeMu (read) with the store open.
func (s *Store) trimMappings() {
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
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		// start-end perms offset dev inode path
		path := line[bytes.LastIndexByte(line, ' ')+1:]
		if !bytes.HasPrefix(path, prefix) || !bytes.HasSuffix(path, []byte(".sst")) {
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
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_PAGEOUT)
	}
}
