package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Definition commands. Every change of vhosts, users, permissions, topic
// permissions, user limits, exchanges, queues, bindings, policies, operator
// policies and global parameters is a defCmd: a plain value, encoded in a small binary
// form (defcodec.go; arguments as encoded AMQP tables, policy definitions
// as their JSON), that a DefinitionLog orders and the broker applies
// (defapply.go). Handlers,
// whether AMQP methods, the management API, definitions import or an
// automatic deletion (an exclusive queue's connection gone, the last
// consumer of an auto-delete queue gone, x-expires), validate what they can
// without the log, propose the command, wait for its apply and reply with
// its result. Everything the apply decides (existence, equivalence, the
// auto-delete exchanges a deletion takes, record ids) depends only on the
// definitions state and the command, so every node that applies the same
// log ends in the same state with the same ids.

// defOp is what a definition command does. The values are part of the
// command encoding: never renumber.
type defOp uint8

const (
	opAddVHost defOp = iota + 1
	opDeleteVHost
	opDeclareExchange
	opDeleteExchange
	opDeclareQueue
	opDeleteQueue
	opBind
	opUnbind
	opPutUser
	opDeleteUser
	opSetPermissions
	opClearPermissions
	opSetTopicPermissions
	opClearTopicPermissions
	opSetPolicy
	opClearPolicy
	opSetGlobal
	opDeleteGlobal
	opSetUserLimits
	opClearUserLimits
	opSetVHostLimits
	opClearVHostLimits
	opEnd
)

var defOpNames = [...]string{"", "add-vhost", "delete-vhost", "declare-exchange", "delete-exchange",
	"declare-queue", "delete-queue", "bind", "unbind", "put-user", "delete-user", "set-permissions",
	"clear-permissions", "set-topic-permissions", "clear-topic-permissions", "set-policy", "clear-policy",
	"set-global-parameter", "delete-global-parameter", "set-user-limits", "clear-user-limits",
	"set-vhost-limits", "clear-vhost-limits"}

func (o defOp) String() string {
	if o > 0 && o < opEnd {
		return defOpNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// defCmd is one definition command. Which fields count depends on Op;
// the others are zero (and left out of the encoding).
type defCmd struct {
	Op    defOp
	VHost string
	// VHostID, when set, is the id of the vhost the command is for: a
	// connection whose vhost was deleted, and maybe created again since,
	// defines nothing in it.
	VHostID uint64
	// Name is the exchange, queue, user, policy or global parameter.
	Name string
	// Type is an exchange's type.
	Type       string
	Durable    bool
	AutoDelete bool
	Internal   bool
	Exclusive  bool
	// Args are the arguments of an exchange, queue or binding, as an
	// encoded AMQP table.
	Args []byte
	// Owner is the id of the connection that declares an exclusive queue
	// (conn.id).
	Owner uint64
	// ID names the queue instance a deletion is for (0 = whichever queue
	// has the name): an automatic deletion must not take a queue
	// declared again under the same name.
	ID uint64
	// IfUnused refuses to delete an exchange that has bindings.
	IfUnused bool
	// Force deletes a transient queue from memory even if the records of
	// the auto-delete exchanges its deletion takes cannot be deleted (an
	// exclusive queue whose connection is gone).
	Force bool
	// Binding: Source exchange, destination Dest (an exchange when
	// ToExchange), routing Key.
	Source     string
	Dest       string
	ToExchange bool
	Key        string
	// User: its password Hash, HashAlgorithm and Tags; permissions and
	// topic permissions name it in User.
	User          string
	Hash          []byte
	HashAlgorithm string
	Tags          []string
	// Permissions (Configure, Write, Read) and topic permissions (Exchange,
	// Write, Read): patterns as set.
	Configure string
	Write     string
	Read      string
	Exchange  string
	// Policy: Pattern, ApplyTo, Priority, Definition (JSON), Operator.
	Pattern    string
	ApplyTo    string
	Priority   int
	Definition []byte
	Operator   bool
	// Value is a global parameter's JSON value, or the user limits a
	// set-user-limits merges into User's (a JSON object of integers).
	// clear-user-limits clears User's limit Name ("all": every one).
	Value []byte
	// Node is the home node of a declared queue ("" = the node that
	// applies the command, as on a single node): there it is a local
	// queue, elsewhere a remote entry (link.go).
	Node string
}

// encode returns the command's encoding (defcodec.go), which
// decodeDefCmd reads back.
func (c *defCmd) encode() ([]byte, error) {
	if c.Op == 0 || c.Op >= opEnd {
		return nil, fmt.Errorf("broker: encoding a definition command: unknown %s", c.Op)
	}
	return c.appendTo(make([]byte, 0, 64)), nil
}

// DefResult is what applying a definition command came to on this node:
// the id it assigned, what it deleted, its error. The log hands it back to
// the proposer unchanged.
type DefResult struct {
	// id is the id of what the command created or found (0 = none).
	id uint64
	// existed is set when a declaration found its object declared already
	// (then id is the existing one's).
	existed bool
	// deleted names what the command deleted, in order: "queue <name>",
	// "exchange <name>" (auto-delete cascades included).
	deleted []string
	// dropped is the number of ready messages a queue deletion dropped;
	// it is this node's count, not part of the replicated state.
	dropped int
	// created reports that a global parameter was new.
	created bool
	// err is why the command was refused: an *amqp.Error as a client
	// would get it, or an error of the admin API (ErrNotFound, ...).
	err error
	// qe and v are the queue and vhost the command declared or found, on
	// this node.
	qe *queueEntity
	v  *vhost
}

// String describes the result by what every node agrees on (not dropped),
// for comparing replays.
func (r DefResult) String() string {
	s := fmt.Sprintf("id=%d existed=%t created=%t deleted=%v", r.id, r.existed, r.created, r.deleted)
	if r.err != nil {
		s += " err=" + r.err.Error()
	}
	return s
}

// DefinitionLog orders definition commands: Propose returns once cmd is
// applied on this node (after every command proposed before it), with the
// result of that apply. On a single node the broker's own log applies at
// once (localDefinitionLog); a cluster commits the command through its
// metadata group and applies it on every node, and its Propose returns once
// the other nodes it reaches have applied it too (CommandDefinitionLog). The error is the log's own
// failure (the command is then not applied here); a refusal by the apply
// is in the result.
type DefinitionLog interface {
	Propose(ctx context.Context, cmd []byte) (DefResult, error)
}

// DefinitionSyncer is a DefinitionLog replicated among nodes that can
// bring this node's definitions up to date: SyncDefinitions returns once
// this node has applied every definition change whose proposal had
// returned, on any node, when it was called. The broker syncs before it
// answers that a queue, exchange or vhost does not exist, or refuses a
// login (syncDefinitions).
type DefinitionSyncer interface {
	SyncDefinitions(ctx context.Context) error
}

// ErrCannotSync is SyncDefinitions' answer from a log that is not
// replicated.
var ErrCannotSync = errors.New("broker: the definitions log cannot sync")

// syncLimit bounds how long a lookup that found nothing waits for this
// node's definitions to sync.
const syncLimit = 2 * time.Second

// syncDefinitions is called when a lookup on this node found nothing (a
// queue, an exchange, a vhost or the user's access to it, a user with that
// password), before the refusal is answered: with replicated definitions
// it waits until this node has every definition change made through any
// node (DefinitionSyncer), and reports whether it did, so that the caller
// looks again. A client that declares through one node and at once uses
// the queue through another thus finds it, whichever node applied the
// declare first. It costs a request to the metadata leader on this path
// only; a single node never waits.
func (b *Broker) syncDefinitions() bool {
	s, ok := b.defLog.(DefinitionSyncer)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), syncLimit)
	defer cancel()
	err := s.SyncDefinitions(ctx)
	if err != nil && !errors.Is(err, ErrCannotSync) {
		b.log.Debug("a lookup that found nothing could not sync the definitions", zap.Error(err))
	}
	return err == nil
}

// DefinitionMachine is the state machine a DefinitionLog applies commands
// to: the broker's definitions. Apply calls are serialised by the log.
type DefinitionMachine interface {
	// ApplyDefinition applies one command and returns its result.
	ApplyDefinition(cmd []byte) DefResult
	// SnapshotDefinitions returns the whole definitions state: the
	// definitions export plus ids and id counters.
	SnapshotDefinitions() ([]byte, error)
	// RestoreDefinitions replaces an empty broker's definitions with a
	// snapshot.
	RestoreDefinitions(snap []byte) error
}

// localDefinitionLog is the single-node log: it applies each command at
// once (ApplyDefinition serialises them on Broker.defMu), storing its
// effect durably before it changes memory.
type localDefinitionLog struct{ m DefinitionMachine }

func (l localDefinitionLog) Propose(_ context.Context, cmd []byte) (DefResult, error) {
	return l.m.ApplyDefinition(cmd), nil
}

// propose encodes c, hands it to the definitions log and waits for its
// apply. The caller holds no lock.
func (b *Broker) propose(c *defCmd) DefResult {
	enc, err := c.encode()
	if err != nil {
		return DefResult{err: err}
	}
	r, err := b.defLog.Propose(context.Background(), enc)
	if err != nil {
		return DefResult{err: fmt.Errorf("broker: %s: %w", c.Op, err)}
	}
	return r
}
