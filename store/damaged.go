package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// A damaged data dir must end in a one-line error that names the file,
// what is wrong with it and what to do, never in a panic: Badger panics
// in a goroutine of its own on some damaged tables, silently drops a
// table whose index fails its checksum, deletes the tables a cut-short
// MANIFEST no longer lists, and truncates a damaged log at the damage,
// dropping everything written after it. checkDataDir looks at the files
// before Badger opens them and refuses what Badger would mishandle.

// ErrDamaged is matched (errors.Is) by a *DamagedError.
var ErrDamaged = errors.New("store: data dir damaged")

// DamagedError describes a damaged file of the data dir.
type DamagedError struct {
	File    string // path of the damaged file
	Problem string // what is wrong with it
	Advice  string // what to do
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("data dir damaged: %s: %s; %s", e.File, e.Problem, e.Advice)
}

// Is makes errors.Is(err, ErrDamaged) true.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

const (
	adviceRestore = "restore the data dir from a backup"
	adviceRepair  = "restore the data dir from a backup, or start once with --repair-data-dir to let Badger truncate it there (what follows is lost)"
)

// badgerLogHeader is the size of the header of a value log or memtable
// log file (Badger's vlogHeaderSize: key id and IV).
const badgerLogHeader = 20

// checkDataDir checks the MANIFEST, the tables and the logs of the Badger
// database in dir. With repair, damage that Badger repairs by truncating
// (a cut-short MANIFEST or log) is left to it.
func checkDataDir(dir string, opts badger.Options, repair bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &DamagedError{File: dir, Problem: fmt.Sprintf("unreadable (%v)", r), Advice: adviceRestore}
		}
	}()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	var tables, vlogs, mems []string
	hasManifest := false
	for _, e := range entries {
		switch name := e.Name(); {
		case name == "MANIFEST":
			hasManifest = true
		case strings.HasSuffix(name, ".sst"):
			tables = append(tables, name)
		case strings.HasSuffix(name, ".vlog"):
			vlogs = append(vlogs, name)
		case strings.HasSuffix(name, ".mem"):
			mems = append(mems, name)
		}
	}
	if !hasManifest {
		if len(tables)+len(vlogs)+len(mems) > 0 {
			return &DamagedError{File: filepath.Join(dir, "MANIFEST"),
				Problem: "missing, while the data files it describes are there (Badger would start empty and delete them)",
				Advice:  adviceRestore}
		}
		return nil // a new data dir
	}
	if err := checkKeyRegistry(dir); err != nil {
		return err
	}
	if err := checkManifest(dir, tables, opts, repair); err != nil {
		return err
	}
	// Badger replays the memtable logs and the newest value log at open,
	// cutting each at its first bad entry.
	sort.Strings(vlogs)
	logs := mems
	if len(vlogs) > 0 {
		logs = append(logs, vlogs[len(vlogs)-1])
	}
	if repair {
		return nil
	}
	for _, name := range logs {
		if err := checkLog(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// checkKeyRegistry reads the KEYREGISTRY, when there is one.
func checkKeyRegistry(dir string) error {
	path := filepath.Join(dir, "KEYREGISTRY")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil // Badger writes a new one
	}
	kr, err := badger.OpenKeyRegistry(badger.KeyRegistryOptions{Dir: dir, ReadOnly: true})
	if err != nil {
		return &DamagedError{File: path, Problem: "unreadable: " + firstLine(err.Error()), Advice: adviceRestore}
	}
	return kr.Close()
}

// checkManifest replays the MANIFEST and opens every table it lists.
func checkManifest(dir string, tables []string, opts badger.Options, repair bool) error {
	path := filepath.Join(dir, "MANIFEST")
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	m, end, err := badger.ReplayManifestFile(f, opts.ExternalMagicVersion, opts)
	if err != nil {
		return &DamagedError{File: path, Problem: "unreadable: " + err.Error(), Advice: adviceRestore}
	}
	if end < st.Size() && !repair {
		for _, name := range tables {
			id, ok := table.ParseFileID(name)
			if _, listed := m.Tables[id]; ok && !listed {
				return &DamagedError{File: path,
					Problem: fmt.Sprintf("cut short at byte %d of %d: it no longer lists table %s, which Badger would delete", end, st.Size(), name),
					Advice:  adviceRepair}
			}
		}
	}
	ids := make([]uint64, 0, len(m.Tables))
	for id := range m.Tables {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if err := checkTable(table.NewFilename(id, dir), m.Tables[id].Compression); err != nil {
			return err
		}
	}
	return nil
}

// checkTable opens one table read-only and verifies its checksums.
func checkTable(path string, compression options.CompressionType) (err error) {
	damaged := func(problem string) error {
		return &DamagedError{File: path, Problem: problem, Advice: adviceRestore + " (Badger cannot repair a damaged table)"}
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return damaged("missing, while the MANIFEST lists it")
	}
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil {
		return damaged("cannot be opened: " + err.Error())
	}
	defer func() { _ = mf.Close(-1) }()
	defer func() {
		if r := recover(); r != nil {
			err = damaged(fmt.Sprintf("unreadable: its index or blocks are damaged, or it is cut short (%d bytes)", len(mf.Data)))
		}
	}()
	t, err := table.OpenTable(mf, table.Options{
		ReadOnly: true, ChkMode: options.OnTableAndBlockRead, Compression: compression, BlockSize: 4 << 10,
	})
	if err != nil {
		return damaged(firstLine(err.Error()))
	}
	if err := t.VerifyChecksum(); err != nil {
		return damaged(firstLine(err.Error()))
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// checkLog reads a value log or memtable log as Badger replays it: entries
// of a header (meta, user meta, uvarint key and value lengths and expiry),
// key, value and a big-endian CRC-32C of all three. Badger cuts the file
// at the first entry that does not read back. That is safe when nothing
// but zeros follows that entry (the unused tail of a preallocated file,
// after a crash mid-write), or when that entry is the last write torn by
// a crash (tornLast); anything else is damage.
func checkLog(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	size := st.Size()
	if size < badgerLogHeader {
		return &DamagedError{File: path, Problem: fmt.Sprintf("cut short: %d bytes, less than its header", size), Advice: adviceRestore}
	}
	r := bufio.NewReaderSize(f, 1<<16)
	if _, err := r.Discard(badgerLogHeader); err != nil {
		return fmt.Errorf("store: reading %s: %w", path, err)
	}
	off := int64(badgerLogHeader)
	crcTable := crc32.MakeTable(crc32.Castagnoli)
	for {
		n, claimed, ok := readLogEntry(r, crcTable)
		if ok {
			off += n
			continue
		}
		// The entry at off does not read back, or is the zero entry that
		// ends a preallocated file. Look at what follows.
		if off == size {
			return nil
		}
		if zero, err := zeroFrom(f, off); err != nil {
			return fmt.Errorf("store: reading %s: %w", path, err)
		} else if zero {
			return nil // the unused tail of a preallocated file
		}
		if end := off + claimed; claimed > 0 && end < size {
			if zero, err := zeroFrom(f, end); err != nil {
				return fmt.Errorf("store: reading %s: %w", path, err)
			} else if zero {
				return nil // an entry torn by a crash, then the unused tail
			}
		}
		if torn, err := tornLast(f, off, size, crcTable); err != nil {
			return fmt.Errorf("store: reading %s: %w", path, err)
		} else if torn {
			return nil // the last write, torn with its header unwritten
		}
		return &DamagedError{File: path,
			Problem: fmt.Sprintf("the entry at byte %d does not read back (bad checksum, or the file is cut short) and %d bytes of data follow it", off, size-off),
			Advice:  adviceRepair}
	}
}

// Badger writes a log entry into its memory-mapped file with one copy,
// and the copy (Go's memmove, for anything over 256 bytes) stores the first
// 32 and the last 128 bytes after everything between them. A process
// killed during the copy leaves an entry whose header and end are still
// zeros while its middle is written, then the zeros of the preallocated
// file: the header claims nothing, and data follows the bad entry.
// tornLast accepts that shape and nothing that would lose a good entry.

const (
	// maxLogEntry bounds the length of one log entry: the largest value
	// Badger takes (the store cuts bodies into smaller chunks), its key
	// and header.
	maxLogEntry = maxValueLen + 1<<17
	// badgerUnknownMeta are the bits of an entry's meta byte that Badger
	// never sets (value.go: bits 0-3, 6 and 7 are used).
	badgerUnknownMeta = 0x30
	// tornScanBudget bounds the bytes checksummed while looking for a
	// good entry inside a torn one; past it the entry counts as damage.
	tornScanBudget = 1 << 30
	// minPreallocatedTail is the fewest zeros a crash leaves after the
	// last write. Badger preallocates a value log at twice
	// ValueLogFileSize and a memtable log at twice MemTableSize, and
	// starts a new one once half is used, so megabytes of zeros follow a
	// torn write. A file cut short that happens to end in a few zero
	// bytes (a length or a zero-filled field) is not that shape.
	minPreallocatedTail = 64 << 10
)

// tornLast reports whether the bad entry at off is the last write, torn
// by a crash: zeros run from somewhere after off to the end of the file,
// the data between is no longer than one entry, and no entry that reads
// back starts inside it, and the zeros run on for at least
// minPreallocatedTail bytes. Cutting the log at off, as Badger does, then
// loses only the torn write, which was never synced nor confirmed. A file
// that ends in data (cut short) or a good entry after the bad one (damage
// in the middle) is not that shape.
func tornLast(f *os.File, off, size int64, crcTable *crc32.Table) (bool, error) {
	last, err := lastNonZero(f, off, size)
	if err != nil || last < 0 {
		return last < 0, err
	}
	if size-1-last < minPreallocatedTail || last-off >= maxLogEntry {
		return false, nil
	}
	// A good entry's checksum may end in zero bytes: read 4 past the data.
	buf := make([]byte, min(size, last+5)-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	budget := int64(tornScanBudget)
	for p := 1; p < len(buf); p++ {
		if buf[p]&badgerUnknownMeta != 0 {
			continue
		}
		good, checked := entryAt(buf[p:], crcTable)
		if budget -= checked; good || budget < 0 {
			return false, nil
		}
	}
	return true, nil
}

// entryAt reports whether b starts with a log entry that reads back, and
// how many bytes it checksummed to find out.
func entryAt(b []byte, crcTable *crc32.Table) (good bool, checked int64) {
	if len(b) < 2 || b[0]&badgerUnknownMeta != 0 {
		return false, 0
	}
	hl := 2
	var lens [3]uint64
	for i := range lens {
		v, n := binary.Uvarint(b[hl:])
		if n <= 0 {
			return false, 0
		}
		lens[i] = v
		hl += n
	}
	klen, vlen := lens[0], lens[1]
	if klen == 0 || klen > 1<<16 || vlen > uint64(len(b)) {
		return false, 0
	}
	end := uint64(hl) + klen + vlen + 4
	if end > uint64(len(b)) {
		return false, 0
	}
	sum := crc32.Checksum(b[:end-4], crcTable)
	return binary.BigEndian.Uint32(b[end-4:end]) == sum, int64(end)
}

// lastNonZero returns the offset of the last byte of f at or after off
// that is not zero, or -1 when there is none.
func lastNonZero(f *os.File, off, size int64) (int64, error) {
	buf := make([]byte, 1<<16)
	for end := size; end > off; {
		start := max(off, end-int64(len(buf)))
		b := buf[:end-start]
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return -1, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				return start + int64(i), nil
			}
		}
		end = start
	}
	return -1, nil
}

// zeroFrom reports whether f holds only zeros from off to its end.
func zeroFrom(f *os.File, off int64) (bool, error) {
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return false, err
	}
	nonZero, err := hasNonZero(bufio.NewReaderSize(f, 1<<16))
	return !nonZero, err
}

// readLogEntry reads one log entry and returns its length and whether it
// is a good one (its CRC matches and it has a key). When it is not,
// claimed is the length its header claims, or 0 when the header is
// unreadable.
func readLogEntry(r *bufio.Reader, crcTable *crc32.Table) (n, claimed int64, ok bool) {
	h := crc32.New(crcTable)
	var hdr [2 + 3*binary.MaxVarintLen64]byte
	meta, err := r.ReadByte()
	if err != nil {
		return 0, 0, false
	}
	userMeta, err := r.ReadByte()
	if err != nil {
		return 0, 0, false
	}
	hdr[0], hdr[1] = meta, userMeta
	hl := 2
	var lens [3]uint64
	for i := range lens {
		v, err := binary.ReadUvarint(r)
		if err != nil {
			return 0, 0, false
		}
		lens[i] = v
		hl += binary.PutUvarint(hdr[hl:], v)
	}
	klen, vlen := lens[0], lens[1]
	if klen > 1<<16 || vlen > 1<<32 {
		return 0, 0, false
	}
	claimed = int64(hl) + int64(klen) + int64(vlen) + 4
	h.Write(hdr[:hl])
	if _, err := io.CopyN(h, r, int64(klen+vlen)); err != nil {
		return 0, claimed, false
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return 0, claimed, false
	}
	if binary.BigEndian.Uint32(sum[:]) != h.Sum32() || klen == 0 {
		return 0, claimed, false
	}
	return claimed, claimed, true
}

// hasNonZero reports whether r holds a byte other than zero.
func hasNonZero(r io.Reader) (bool, error) {
	buf := make([]byte, 1<<16)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return true, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// openBadger is badger.Open, with a panic on its goroutine turned into an
// error and Badger's errors about the files of the data dir explained.
func openBadger(opts badger.Options) (db *badger.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, &DamagedError{File: opts.Dir, Problem: "unreadable (" + firstLine(fmt.Sprint(r)) + ")", Advice: adviceRestore}
		}
	}()
	db, err = badger.Open(opts)
	if err == nil {
		return db, nil
	}
	msg := firstLine(err.Error())
	switch {
	case strings.Contains(msg, "sanity text") || strings.Contains(msg, "KEYREGISTRY") || strings.Contains(msg, "key registry"):
		return nil, &DamagedError{File: filepath.Join(opts.Dir, "KEYREGISTRY"), Problem: "unreadable: " + msg, Advice: adviceRestore}
	case strings.Contains(msg, "Cannot acquire directory lock"):
		return nil, fmt.Errorf("store: data dir %s is in use by another process: %w", opts.Dir, err)
	}
	return nil, fmt.Errorf("store: open %s: %w", opts.Dir, err)
}
