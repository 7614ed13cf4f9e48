package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/warrenmq/warren/store"
	"go.uber.org/zap"
)

// Replication. State that the cluster replicates (definitions; the queues of a
// data group) changes only by a command proposed to a CommandLog and applied,
// once the log has committed it, by the StateMachine the log drives. A handler
// validates, proposes, waits for its command to be applied on this node, and
// replies. The broker declares these interfaces and never imports the cluster
// package, which implements CommandLog with Raft; LocalLog (below) is the
// single-node implementation, where committed means fsynced in the store's
// group commit.

// StateMachine is the state a CommandLog drives: the same commands applied in
// the same order give the same state and results on every node.
type StateMachine interface {
	// Apply applies the command committed at index and returns its result
	// (handed to the proposer on this node). The log calls Apply from one
	// goroutine, in index order, each index once; never concurrently with
	// Snapshot or Restore. Apply must not propose and wait.
	Apply(index uint64, cmd []byte) any
	// Snapshot captures the state as of the last index applied. It is
	// called between Applies and must be quick: the returned snapshot is
	// written out later, while Apply goes on, so it must not share mutable
	// state with the machine.
	Snapshot() (StateSnapshot, error)
	// Restore replaces the whole state with the snapshot read from r, taken
	// when index was the last index applied. It is called before any Apply
	// at start, or (in a cluster) when a lagging node is sent a snapshot.
	Restore(index uint64, r io.Reader) error
}

// StateSnapshot is a point-in-time state captured by StateMachine.Snapshot.
type StateSnapshot interface {
	// WriteTo writes the snapshot; Restore reads what it wrote.
	io.WriterTo
	// Release is called once the snapshot is written or abandoned.
	Release()
}

// Applied is a command applied by the log: its index and the result of
// StateMachine.Apply.
type Applied struct {
	Index  uint64
	Result any
}

// CommandLog is a replicated log of commands.
type CommandLog interface {
	// Propose submits cmd and waits until it is committed and applied on
	// this node, so that the caller reads its own write. On ctx's end it
	// returns ctx.Err(); the command may still be committed and applied.
	// cmd is the caller's again when Propose returns.
	Propose(ctx context.Context, cmd []byte) (Applied, error)
	// ProposeFunc submits cmd and calls done once it is applied on this
	// node, or with the error that stopped it. done runs on the log's apply
	// goroutine (or, for an error found at once, on the caller's): it must
	// be quick and must not propose and wait. The log copies cmd before
	// ProposeFunc returns.
	ProposeFunc(cmd []byte, done func(Applied, error))
}

var (
	// ErrLogClosed is returned for a proposal to a log closed or not
	// started.
	ErrLogClosed = errors.New("broker: command log closed")
	// ErrLogFailed is returned for proposals after the log failed to write
	// an entry: the log takes no more commands until it is opened again.
	ErrLogFailed = errors.New("broker: command log failed")
)

// LocalLogConfig configures NewLocalLog.
type LocalLogConfig struct {
	// Store holds the log (store.Log) and its snapshot. Close the LocalLog
	// before the store.
	Store *store.Store
	// LogID names the log in the store; each LocalLog of a store needs its
	// own.
	LogID uint64
	// Machine is the state the log drives.
	Machine StateMachine
	// SnapshotEvery is how many applied entries lead to a snapshot, after
	// which the log's entries up to it are deleted; 0 means 8192.
	SnapshotEvery uint64
	// Logger; nil means zap.NewNop().
	Logger *zap.Logger
}

// snapshotKey is the log value holding LocalLog's snapshot: the index it was
// taken at (8 bytes, big-endian), then what StateSnapshot.WriteTo wrote.
var snapshotKey = []byte("snapshot")

// LocalLog is the single-node CommandLog: a proposal is appended to a
// store.Log in the store's group commit (many proposals, and messages, share
// one fsync) and, once durable, applied in index order by the log's apply
// goroutine. Start replays the log after the last snapshot, so the machine
// comes back with every command whose proposal succeeded. Every SnapshotEvery
// entries the apply goroutine takes a snapshot, stores it as a log value and
// deletes the entries it covers.
//
// A failed write stops the log (ErrLogFailed): the entries after it may be
// durable but are never applied, and Start deletes them; the command that
// failed was written or not, as the store's error says nothing more.
type LocalLog struct {
	log   *store.Log
	sm    StateMachine
	every uint64
	lg    *zap.Logger

	// mu orders proposals: an index is assigned and its entry submitted to
	// the store under it, so entries reach the writer, and complete, in
	// index order. It is held while Append waits on the store's backlog, and
	// never taken by the store's writer.
	mu     sync.Mutex
	next   uint64 // index of the next proposal
	closed bool
	failed atomic.Bool

	// cmu guards the queue between the store's writer (which completes
	// appends) and the apply goroutine. Leaf lock.
	cmu      sync.Mutex
	queue    []proposal // durable (or failed), waiting to be applied, in index order
	inflight int        // proposals submitted and not yet handled by the applier
	stopping bool

	applied   atomic.Uint64 // last index applied
	snapIndex uint64        // index of the last snapshot (apply goroutine)

	wake chan struct{} // cap 1
	wg   sync.WaitGroup
}

type proposal struct {
	index uint64
	cmd   []byte
	err   error
	done  func(Applied, error)
}

// NewLocalLog returns a LocalLog; Start opens it.
func NewLocalLog(cfg LocalLogConfig) (*LocalLog, error) {
	if cfg.Store == nil || cfg.Machine == nil {
		return nil, errors.New("broker: LocalLogConfig needs a Store and a Machine")
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = 8192
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &LocalLog{
		log:   cfg.Store.Log(cfg.LogID),
		sm:    cfg.Machine,
		every: cfg.SnapshotEvery,
		lg:    cfg.Logger.Named("command-log").With(zap.Uint64("log-id", cfg.LogID)),
		wake:  make(chan struct{}, 1),
	}, nil
}

// Start restores the machine from the log's snapshot, if any, applies the
// entries after it, and starts the apply goroutine, which Close stops.
// Entries after a gap (left by a failed write) are deleted. It may be called
// once; proposals before it fail with ErrLogClosed.
func (l *LocalLog) Start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.next != 0 {
		return fmt.Errorf("%w: Start after Start or Close", ErrLogClosed)
	}
	last := uint64(0)
	v, err := l.log.Value(snapshotKey)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return fmt.Errorf("broker: command log snapshot: %w", err)
	case len(v) < 8:
		return fmt.Errorf("broker: command log snapshot of %d bytes", len(v))
	default:
		last = binary.BigEndian.Uint64(v)
		if err := l.sm.Restore(last, bytes.NewReader(v[8:])); err != nil {
			return fmt.Errorf("broker: restore command log snapshot at %d: %w", last, err)
		}
	}
	l.snapIndex = last
	first, end, err := l.log.Bounds()
	if err != nil {
		return err
	}
	if first > last+1 {
		return fmt.Errorf("broker: command log starts at %d, snapshot at %d: entries missing", first, last)
	}
	gap := uint64(0)
	err = l.log.Entries(last+1, end, func(e *store.LogEntry) error {
		if e.Index != last+1 {
			gap = last + 1
			return errStopReplay
		}
		l.sm.Apply(e.Index, e.Data)
		last = e.Index
		return nil
	})
	if err != nil && !errors.Is(err, errStopReplay) {
		return fmt.Errorf("broker: replay command log: %w", err)
	}
	if gap > 0 {
		l.lg.Warn("deleting command log entries after a gap", zap.Uint64("gap", gap), zap.Uint64("last", end))
		if err := l.log.DeleteRange(gap, end); err != nil {
			return err
		}
	}
	l.applied.Store(last)
	l.next = last + 1
	l.wg.Add(1)
	go l.run()
	return nil
}

var errStopReplay = errors.New("stop replay")

// Propose implements CommandLog.
func (l *LocalLog) Propose(ctx context.Context, cmd []byte) (Applied, error) {
	type result struct {
		a   Applied
		err error
	}
	ch := make(chan result, 1)
	l.ProposeFunc(cmd, func(a Applied, err error) { ch <- result{a, err} })
	select {
	case r := <-ch:
		return r.a, r.err
	case <-ctx.Done():
		return Applied{}, ctx.Err()
	}
}

// ProposeFunc implements CommandLog.
func (l *LocalLog) ProposeFunc(cmd []byte, done func(Applied, error)) {
	if l.failed.Load() {
		done(Applied{}, ErrLogFailed)
		return
	}
	cmd = bytes.Clone(cmd)
	l.mu.Lock()
	if l.closed || l.next == 0 {
		l.mu.Unlock()
		done(Applied{}, ErrLogClosed)
		return
	}
	index := l.next
	l.next++
	l.cmu.Lock()
	l.inflight++
	l.cmu.Unlock()
	l.log.Append([]store.LogEntry{{Index: index, Term: 1, Data: cmd}}, func(err error) {
		l.cmu.Lock()
		l.queue = append(l.queue, proposal{index: index, cmd: cmd, err: err, done: done})
		l.cmu.Unlock()
		select {
		case l.wake <- struct{}{}:
		default:
		}
	})
	l.mu.Unlock()
}

// AppliedIndex is the last index applied to the machine.
func (l *LocalLog) AppliedIndex() uint64 { return l.applied.Load() }

// run is the apply goroutine: it applies durable proposals in index order and
// takes snapshots.
func (l *LocalLog) run() {
	defer l.wg.Done()
	var batch []proposal
	for {
		<-l.wake
		l.cmu.Lock()
		batch, l.queue = l.queue, batch[:0]
		l.cmu.Unlock()
		for i := range batch {
			l.apply(&batch[i])
		}
		clear(batch)
		l.cmu.Lock()
		l.inflight -= len(batch)
		stop := l.stopping && l.inflight == 0
		l.cmu.Unlock()
		if stop {
			return
		}
	}
}

// apply handles one completed proposal (apply goroutine).
func (l *LocalLog) apply(p *proposal) {
	switch {
	case p.err != nil:
		if !l.failed.Swap(true) {
			l.lg.Error("command log write failed; the log takes no more commands", zap.Uint64("index", p.index), zap.Error(p.err))
		}
		p.done(Applied{}, fmt.Errorf("%w: %w", ErrLogFailed, p.err))
		return
	case l.failed.Load():
		p.done(Applied{}, ErrLogFailed)
		return
	}
	res := l.sm.Apply(p.index, p.cmd)
	l.applied.Store(p.index)
	p.done(Applied{Index: p.index, Result: res}, nil)
	if p.index-l.snapIndex >= l.every {
		if err := l.snapshot(p.index); err != nil {
			l.lg.Warn("command log snapshot failed; the log keeps its entries", zap.Uint64("index", p.index), zap.Error(err))
		}
	}
}

// snapshot stores a snapshot taken at index and deletes the entries it covers
// (apply goroutine).
func (l *LocalLog) snapshot(index uint64) error {
	snap, err := l.sm.Snapshot()
	if err != nil {
		return err
	}
	defer snap.Release()
	var buf bytes.Buffer
	buf.Write(binary.BigEndian.AppendUint64(nil, index))
	if _, err := snap.WriteTo(&buf); err != nil {
		return err
	}
	if err := l.log.SetValue(snapshotKey, buf.Bytes()); err != nil {
		return err
	}
	l.snapIndex = index
	return l.log.DeleteRange(0, index)
}

// Close stops taking proposals, waits until those submitted are applied (or
// failed), and stops the apply goroutine. Call it before closing the store.
// Close is idempotent.
func (l *LocalLog) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	started := l.next != 0
	l.mu.Unlock()
	if !started {
		return nil
	}
	l.cmu.Lock()
	l.stopping = true
	l.cmu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	l.wg.Wait()
	return nil
}
