package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// schemaVersion is the layout version this code reads and writes (see doc.go).
// Version 2 added chunked message bodies (large.go), version 3 the ordered logs
// (prefix 'r', logs.go); an older database has neither, and upgrade makes it
// version 4. Version 4 changed no record: a data group's log entries moved
// out of the database into segment logs (segments.go), which the cluster
// does when it starts each group; the version keeps builds that would look
// for those entries in the database from opening it.
const schemaVersion = 4

const (
	defaultGCInterval = time.Minute
	defaultMaxBatch   = 4096
	defaultMaxBacklog = 64 << 20
	// removeDelay is how long removals and delivery marks may wait for an append or a
	// flush to ride along with before they are written on their own.
	removeDelay = 200 * time.Millisecond
)

var (
	// ErrNotFound is returned for a message or definition that is not in the store.
	ErrNotFound = errors.New("store: not found")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("store: closed")
	// ErrCorrupt is wrapped by errors about records whose checksum or encoding is bad.
	ErrCorrupt = errors.New("store: corrupt record")
	// ErrUnknownKind is returned for a definition type or Kind the store does not know.
	ErrUnknownKind = errors.New("store: unknown definition kind")
	// ErrSchemaVersion is returned by Open when the data dir was written by a newer
	// layout than this code knows, or its schema-version key is unreadable.
	ErrSchemaVersion = errors.New("store: unsupported schema version")
)

// Config configures Open.
type Config struct {
	// Dir is the data directory; Open creates it.
	Dir string
	// Logger receives the store's and Badger's warnings; nil means zap.NewNop().
	Logger *zap.Logger
	// NoSync skips fsync. For tests only: a crash may lose confirmed work.
	NoSync bool
	// GCInterval is how often value-log GC runs (sooner while the value log has more
	// than a few files); 0 means one minute.
	GCInterval time.Duration
	// MaxBatch is the most journal entries written in one group commit; 0 means 4096.
	MaxBatch int
	// Repair lets Badger repair what it repairs by truncating: a
	// cut-short MANIFEST, a damaged value log or memtable log, losing what
	// follows the damage. Without it such damage fails Open with a
	// *DamagedError (damaged.go).
	Repair bool

	// maxBacklog caps the bytes of appends submitted but not yet durable; 0 means 64 MiB.
	maxBacklog int64
}

// Store is the node's durable storage. All methods are safe for concurrent use.
type Store struct {
	dir    string // the data directory, as given
	noSync bool   // Config.NoSync
	// commitNs is how long the last group commit took to write and sync
	// its batch, in nanoseconds (CommitLatency).
	commitNs   atomic.Int64
	db         *badger.DB
	log        *zap.Logger
	maxBatch   int
	maxBacklog int64

	// lifeMu is held for reading by calls that use db directly and for writing by Close
	// to set closed, so db is never used after it is closed. closeDone is closed when
	// Close has finished.
	lifeMu    sync.RWMutex
	closed    bool
	closeDone chan struct{}

	// defMu serializes definition writes so id assignment and the counters agree.
	defMu  sync.Mutex
	lastID [kindEnd]uint64
	// defHook is SetDefinitionHook's hook; defWrites counts definition writes.
	defHook   atomic.Pointer[func() error]
	defWrites atomic.Int64
	// defQueued counts definition writes queued for the journal writer
	// (UpdateAppliedQueued) and not yet done: a direct write waits for
	// them first, so definition writes reach Badger in the order made.
	defQueued atomic.Int64

	// mu guards the journal's submission side; cond (on mu) is signalled when the
	// backlog shrinks or the store stops.
	mu       sync.Mutex
	cond     sync.Cond
	pending  [][]op              // submitted, not yet taken by the writer: blocks of ≤ maxBatch ops
	npending int                 // ops in pending
	free     [][]op              // empty blocks for reuse
	urgent   int                 // appends and flushes in pending: the writer should not wait
	backlog  int64               // bytes of appends submitted and not yet completed
	waiters  int                 // Appends blocked on the backlog cap
	stopping bool                // no more submissions
	marked   map[msgRef]struct{} // messages with a delivery-mark record (written or queued)
	// lateMarks are first delivery marks not yet queued, and late their number
	// (journal.go).
	lateMarks [2]map[msgRef]uint32
	late      int

	gcRuns  atomic.Int64 // value-log GC rounds started, for tests
	commits atomic.Int64 // group commits started by the writer, for tests
	// activity counts the store's reads and writes of Badger, so that the
	// trimmer (trim_linux.go) skips the search of the newest logs' write
	// tails while the store is idle.
	activity atomic.Int64
	// cancelled counts appends removed before their group commit, and so
	// never written (cancelSettled).
	cancelled atomic.Int64
	// settling is cancelSettled's scratch map, kept between batches (writer
	// goroutine only).
	settling map[[msgKeyLen]byte]pendingMsg
	// chunked holds the values with chunk records (messages, spilled messages,
	// stream chunk data), by key, and how many (large.go). Guarded by mu.
	chunked map[string]uint32
	// journalFault is the writer's fault hook (SetJournalFault).
	journalFault atomic.Pointer[func(key []byte) error]
	// appendFailed is told of failed appends (OnAppendFailure).
	appendFailed atomic.Pointer[func(queueID, seq uint64, err error)]

	wake chan struct{} // cap 1: pending changed
	stop chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// Open opens or creates the store in cfg.Dir, checks the schema version and starts the
// group-commit writer and the value-log GC goroutine, which Close stops.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("store: Config.Dir is empty")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = defaultGCInterval
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = defaultMaxBatch
	}
	if cfg.maxBacklog <= 0 {
		cfg.maxBacklog = defaultMaxBacklog
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	log := cfg.Logger.Named("store")
	opts := badgerOptions(cfg.Dir, cfg.NoSync, log)
	if err := checkDataDir(cfg.Dir, opts, cfg.Repair); err != nil {
		return nil, err
	}
	db, err := openBadger(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:        cfg.Dir,
		noSync:     cfg.NoSync,
		db:         db,
		log:        log,
		maxBatch:   cfg.MaxBatch,
		maxBacklog: cfg.maxBacklog,
		marked:     make(map[msgRef]struct{}),
		lateMarks:  [2]map[msgRef]uint32{make(map[msgRef]uint32), make(map[msgRef]uint32)},
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		closeDone:  make(chan struct{}),
	}
	s.cond.L = &s.mu
	if err := s.init(); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	// Spilled messages were transient: they die with the process that
	// paged them out.
	if err := s.removePrefix([]byte{prefixSpill}); err != nil {
		return nil, errors.Join(fmt.Errorf("store: dropping spilled messages: %w", err), db.Close())
	}
	s.wg.Add(3)
	go s.writeLoop()
	go s.gcLoop(cfg.GCInterval)
	go s.trimLoop()
	return s, nil
}

// init checks or writes the schema version and reads the id counters.
func (s *Store) init() error {
	return s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(schemaKey)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			rec := sealRecord(binary.AppendUvarint(beginRecord(nil), schemaVersion))
			if err := txn.Set(schemaKey, rec); err != nil {
				return fmt.Errorf("store: write schema version: %w", err)
			}
		case err != nil:
			return fmt.Errorf("store: read schema version: %w", err)
		default:
			v, err := readUvarintRecord(item)
			if err != nil {
				return fmt.Errorf("%w: %w", ErrSchemaVersion, err)
			}
			switch v {
			case schemaVersion:
			case 1, 2, 3:
				if err := s.upgrade(txn, v); err != nil {
					return err
				}
			default:
				return fmt.Errorf("%w: %d, this build knows %d", ErrSchemaVersion, v, schemaVersion)
			}
		}
		for k := KindVHost; k < kindEnd; k++ {
			item, err := txn.Get(counterKey(k))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("store: read %s id counter: %w", k, err)
			}
			if s.lastID[k], err = readUvarintRecord(item); err != nil {
				return fmt.Errorf("store: read %s id counter: %w", k, err)
			}
		}
		return nil
	})
}

// upgrade brings a database of schema version from up to schemaVersion, in
// txn. Versions 2 and 3 only added records (chunked bodies, then the logs
// under prefix 'r', which older builds never wrote): messages and definitions
// stay as they are. Below version 3 any key under 'r' is deleted all the
// same, so that a log starts empty; version 4 changed no record (its logs
// stay). The new version is written so that older builds refuse the database
// from now on.
func (s *Store) upgrade(txn *badger.Txn, from uint64) error {
	var stray [][]byte
	if from < 3 {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{prefixLog}, PrefetchValues: false})
		for it.Rewind(); it.Valid(); it.Next() {
			stray = append(stray, it.Item().KeyCopy(nil))
		}
		it.Close()
	}
	for _, k := range stray {
		if err := txn.Delete(k); err != nil {
			return fmt.Errorf("store: upgrade from schema %d: %w", from, err)
		}
	}
	rec := sealRecord(binary.AppendUvarint(beginRecord(nil), schemaVersion))
	if err := txn.Set(schemaKey, rec); err != nil {
		return fmt.Errorf("store: write schema version: %w", err)
	}
	s.log.Info("upgraded the data dir's schema", zap.Uint64("from", from), zap.Uint64("to", schemaVersion), zap.Int("stray-log-keys", len(stray)))
	return nil
}

// readUvarintRecord decodes a record whose payload is one uvarint.
func readUvarintRecord(item *badger.Item) (uint64, error) {
	var v uint64
	err := item.Value(func(val []byte) error {
		payload, err := openRecord(val)
		if err != nil {
			return err
		}
		d := decoder{b: payload}
		v = d.uvarint()
		return d.finish()
	})
	return v, err
}

// Close writes and syncs everything submitted to the journal (running its callbacks),
// stops the store's goroutines and closes Badger. Appends after Close fail with
// ErrClosed; Remove and MarkDelivered after Close are dropped. Close is idempotent: a
// second call waits for the first.
//
// Close holds lifeMu only to set closed: the store's goroutines (the trimmer takes
// lifeMu to read) are stopped and waited for after it is released, and Badger is
// closed after them, when no call can use it any more.
// NoSync reports whether the store was opened with Config.NoSync: logs kept
// beside it (SegmentLog) skip their syncs too.
func (s *Store) NoSync() bool { return s.noSync }

func (s *Store) Close() error {
	s.lifeMu.Lock()
	if s.closed {
		s.lifeMu.Unlock()
		<-s.closeDone
		return nil
	}
	s.closed = true
	s.lifeMu.Unlock()
	defer close(s.closeDone)

	s.mu.Lock()
	s.stopping = true
	s.cond.Broadcast()
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()

	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}
