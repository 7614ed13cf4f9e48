package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/store"
)

// Definitions over a CommandLog. The definitions are one StateMachine
// (DefinitionStateMachine) of a CommandLog (a cluster's metadata group, or
// a LocalLog), and proposals go through it (CommandDefinitionLog): that
// pair is what Config.DefinitionLog returns when the definitions are
// replicated.

// DefinitionStateMachine is m as a StateMachine: each command is applied
// with ApplyDefinition, and the snapshot is SnapshotDefinitions.
func DefinitionStateMachine(m DefinitionMachine) StateMachine { return &defStateMachine{m: m} }

// defStateMachine: last is the last index applied or restored (the log's
// apply goroutine).
type defStateMachine struct {
	m    DefinitionMachine
	last uint64
}

// indexedMachine is a DefinitionMachine that knows which log indexes its
// stored definitions hold (the Broker): the state machine applies and
// restores through it, so that a restarted node skips what it stored
// already.
type indexedMachine interface {
	ApplyDefinitionAt(index uint64, cmd []byte) DefResult
	RestoreDefinitionsAt(index uint64, snap []byte) error
	RecordDefinitionsApplied(index uint64) error
}

func (d *defStateMachine) Apply(index uint64, cmd []byte) any {
	d.last = index
	if im, ok := d.m.(indexedMachine); ok {
		return im.ApplyDefinitionAt(index, cmd)
	}
	return d.m.ApplyDefinition(cmd)
}

// Snapshot records the last index applied as stored first: every change
// up to it that the store holds is stored, so a restart never needs this
// snapshot (or the entries it covers) again.
func (d *defStateMachine) Snapshot() (StateSnapshot, error) {
	if im, ok := d.m.(indexedMachine); ok && d.last != 0 {
		if err := im.RecordDefinitionsApplied(d.last); err != nil {
			return nil, err
		}
	}
	snap, err := d.m.SnapshotDefinitions()
	if err != nil {
		return nil, err
	}
	return bytesSnapshot(snap), nil
}

func (d *defStateMachine) Restore(index uint64, r io.Reader) error {
	snap, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	d.last = index
	if im, ok := d.m.(indexedMachine); ok {
		return im.RestoreDefinitionsAt(index, snap)
	}
	return d.m.RestoreDefinitions(snap)
}

// Restart without applying twice. The broker stores each definition change
// in its own records as it applies the command; with a log index (a
// replicated command), the store write also records the index
// (store.UpdateApplied). At start the broker recovers its definitions (and
// the messages of durable queues) from the store as a single node does, and
// the log, which replays the entries after its last snapshot, finds the
// commands up to the recorded index already in them: ApplyDefinitionAt skips
// those, and RestoreDefinitionsAt a snapshot no newer. A command whose apply
// wrote nothing (a refusal, a transient object) is replayed, which gives the
// same stored state.

// ApplyDefinitionAt applies the command at index of a replicated log: as
// ApplyDefinition, with index recorded in the store write, and skipped
// (an empty result) when the stored definitions hold it already.
func (b *Broker) ApplyDefinitionAt(index uint64, enc []byte) DefResult {
	if index != 0 && index <= b.storedApplied.Load() {
		return DefResult{}
	}
	c, err := decodeDefCmd(enc)
	if err != nil {
		return DefResult{err: err}
	}
	b.defMu.Lock()
	b.defIndex.Store(index)
	b.defQueued = index != 0
	r, after := b.applyLocked(c)
	b.defQueued = false
	b.defIndex.Store(0)
	b.defMu.Unlock()
	if after != nil {
		after()
	}
	return r
}

// RestoreDefinitionsAt replaces the definitions with snap, taken at index of
// a replicated log: nothing to do when the stored definitions hold index
// already or equal snap; otherwise the snapshot replaces every definition,
// in memory and in the store (records not in it deleted), with index
// recorded. On a node that has queues (one that fell behind the log), the
// queues of this node that the snapshot lists keep their messages
// (defrestore.go). A failure is logged and reported (DefinitionsBehind):
// the log sends the snapshot again.
func (b *Broker) RestoreDefinitionsAt(index uint64, snap []byte) error {
	err := b.restoreDefinitionsAt(index, snap)
	if err != nil {
		msg := fmt.Sprintf("%v: %v", errRestoreFailed, err)
		b.restoreErr.Store(&msg)
		b.log.Error("cannot install the cluster's definitions snapshot: this node stays behind the cluster until it can; the cluster retries",
			zap.Uint64("index", index), zap.Error(err))
		return err
	}
	if b.restoreErr.Swap(nil) != nil {
		b.log.Info("installed the cluster's definitions snapshot: this node caught up", zap.Uint64("index", index))
	}
	return nil
}

func (b *Broker) restoreDefinitionsAt(index uint64, snap []byte) error {
	b.recoverOnce.Do(func() {})
	if index <= b.storedApplied.Load() {
		return nil
	}
	cur, err := b.SnapshotDefinitions()
	if err != nil {
		return err
	}
	if bytes.Equal(cur, snap) {
		if st := b.cfg.Store; st != nil {
			if err := st.UpdateApplied(index, nil, nil); err != nil {
				return err
			}
		}
		b.storedApplied.Store(index)
		return nil
	}
	var dels []store.DefRef
	if st := b.cfg.Store; st != nil {
		defs, err := st.LoadDefinitions()
		if err != nil {
			return err
		}
		dels = definitionRefs(defs)
	}
	if err := b.restoreDefinitions(snap, index, dels); err != nil {
		return err
	}
	b.storedApplied.Store(index)
	return nil
}

// errDefsNotStored fails a snapshot after a queued definition write failed.
var errDefsNotStored = errors.New("broker: a replicated definition change was not stored; restart the node")

// RecordDefinitionsApplied records index as applied in the store: the
// definitions in memory, whose durable part the store holds, are those of
// the log up to index.
func (b *Broker) RecordDefinitionsApplied(index uint64) error {
	if b.defStoreFailed.Load() {
		// The store is behind memory (storeDefs): the log must keep the
		// entries it lacks.
		return errDefsNotStored
	}
	if index <= b.storedApplied.Load() {
		return nil
	}
	if st := b.cfg.Store; st != nil {
		if err := st.UpdateApplied(index, nil, nil); err != nil {
			return err
		}
	}
	b.storedApplied.Store(index)
	return nil
}

// definitionRefs names every record of d.
func definitionRefs(d *store.Definitions) []store.DefRef {
	refs := []store.DefRef{}
	add := func(k store.Kind, n int, id func(int) uint64) {
		for i := range n {
			refs = append(refs, store.DefRef{Kind: k, ID: id(i)})
		}
	}
	add(store.KindVHost, len(d.VHosts), func(i int) uint64 { return d.VHosts[i].ID })
	add(store.KindUser, len(d.Users), func(i int) uint64 { return d.Users[i].ID })
	add(store.KindPermission, len(d.Permissions), func(i int) uint64 { return d.Permissions[i].ID })
	add(store.KindTopicPermission, len(d.TopicPermissions), func(i int) uint64 { return d.TopicPermissions[i].ID })
	add(store.KindGlobalParameter, len(d.GlobalParameters), func(i int) uint64 { return d.GlobalParameters[i].ID })
	add(store.KindPolicy, len(d.Policies), func(i int) uint64 { return d.Policies[i].ID })
	add(store.KindExchange, len(d.Exchanges), func(i int) uint64 { return d.Exchanges[i].ID })
	add(store.KindQueue, len(d.Queues), func(i int) uint64 { return d.Queues[i].ID })
	add(store.KindBinding, len(d.Bindings), func(i int) uint64 { return d.Bindings[i].ID })
	return refs
}

// staleRecords returns the refs in have that no record of keep names.
func staleRecords(have []store.DefRef, keep []any) []store.DefRef {
	kept := make(map[store.DefRef]bool, len(keep))
	for _, r := range keep {
		if ref, ok := store.RefOf(r); ok {
			kept[ref] = true
		}
	}
	out := []store.DefRef{}
	for _, r := range have {
		if !kept[r] {
			out = append(out, r)
		}
	}
	return out
}

// bytesSnapshot is a snapshot already encoded.
type bytesSnapshot []byte

func (s bytesSnapshot) WriteTo(w io.Writer) (int64, error) { return bytes.NewReader(s).WriteTo(w) }
func (s bytesSnapshot) Release()                           {}

// CommandDefinitionLog proposes definition commands to log, whose state
// machine is DefinitionStateMachine of the broker.
func CommandDefinitionLog(log CommandLog) DefinitionLog { return commandDefLog{log} }

type commandDefLog struct{ log CommandLog }

// SyncDefinitions implements DefinitionSyncer when the log can sync (a
// cluster's metadata group); otherwise it reports ErrCannotSync.
func (l commandDefLog) SyncDefinitions(ctx context.Context) error {
	s, ok := l.log.(interface{ Sync(context.Context) error })
	if !ok {
		return ErrCannotSync
	}
	return s.Sync(ctx)
}

func (l commandDefLog) Propose(ctx context.Context, cmd []byte) (DefResult, error) {
	a, err := l.log.Propose(ctx, cmd)
	if err != nil {
		return DefResult{}, err
	}
	r, ok := a.Result.(DefResult)
	if !ok {
		return DefResult{}, fmt.Errorf("broker: definitions log applied entry %d with %T, not a definition result", a.Index, a.Result)
	}
	if aw, ok := l.log.(peerAwaiter); ok && r.err == nil {
		// A change is answered once the other nodes have it too: a
		// client told declare-ok may publish through any of them next.
		aw.AwaitPeers(ctx, a.Index)
	}
	return r, nil
}

// peerAwaiter is a CommandLog replicated among nodes that can wait until
// the other nodes applied an index (a cluster's metadata group: bounded,
// skipping nodes that do not answer).
type peerAwaiter interface {
	AwaitPeers(ctx context.Context, index uint64)
}
