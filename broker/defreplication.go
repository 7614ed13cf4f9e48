package broker

import (
	"bytes"
	"context"
	"fmt"
	"io"
)

// Definitions over a CommandLog. The definitions are one StateMachine
// (DefinitionStateMachine) of a CommandLog (a cluster's metadata group, or
// a LocalLog), and proposals go through it (CommandDefinitionLog): that
// pair is what Config.DefinitionLog returns when the definitions are
// replicated.

// DefinitionStateMachine is m as a StateMachine: each command is applied
// with ApplyDefinition, and the snapshot is SnapshotDefinitions.
func DefinitionStateMachine(m DefinitionMachine) StateMachine { return defStateMachine{m} }

type defStateMachine struct{ m DefinitionMachine }

func (d defStateMachine) Apply(_ uint64, cmd []byte) any { return d.m.ApplyDefinition(cmd) }

func (d defStateMachine) Snapshot() (StateSnapshot, error) {
	snap, err := d.m.SnapshotDefinitions()
	if err != nil {
		return nil, err
	}
	return bytesSnapshot(snap), nil
}

func (d defStateMachine) Restore(_ uint64, r io.Reader) error {
	snap, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return d.m.RestoreDefinitions(snap)
}

// bytesSnapshot is a snapshot already encoded.
type bytesSnapshot []byte

func (s bytesSnapshot) WriteTo(w io.Writer) (int64, error) { return bytes.NewReader(s).WriteTo(w) }
func (s bytesSnapshot) Release()                           {}

// CommandDefinitionLog proposes definition commands to log, whose state
// machine is DefinitionStateMachine of the broker.
func CommandDefinitionLog(log CommandLog) DefinitionLog { return commandDefLog{log} }

type commandDefLog struct{ log CommandLog }

func (l commandDefLog) Propose(ctx context.Context, cmd []byte) (DefResult, error) {
	a, err := l.log.Propose(ctx, cmd)
	if err != nil {
		return DefResult{}, err
	}
	r, ok := a.Result.(DefResult)
	if !ok {
		return DefResult{}, fmt.Errorf("broker: definitions log applied entry %d with %T, not a definition result", a.Index, a.Result)
	}
	return r, nil
}
