// Package queue holds one queue's logic as a deterministic state machine:
// ready messages, unacknowledged deliveries and their delivery counts,
// consumers (by id) and their credit and priorities, dispatch order,
// message TTL, length limits, message priorities, single active consumer,
// message groups (groups.go: one consumer at a time per group, in order),
// delivery limits, the dead-letter decisions (with the x-death bookkeeping
// of AddDeath), the deduplication of resent publishes (dedup.go), the
// deduplication cache of x-message-deduplication (msgdedup.go: messages
// keyed by a header, checked by OpEnqueue; its keys, 128-bit hashes of the
// header's value, and the allocation-free cache, shared with the broker's
// deduplicating exchanges, in dedupcache.go), and the queue's own expiry.
//
// A Queue owns no goroutine, does no I/O and reads no clock. The caller (the
// broker) serialises every call with its own lock.
//
// # Commands and effects
//
// Every change is a command (command.go): a Cmd value — OpEnqueue (with
// publisher id and sequence), OpAttach and OpDetach (consumers by
// ConsumerID, with prefetch and priority), OpCheckout (dispatch), OpGet,
// OpSettle, OpReturn and OpDiscard (by message id, the entry's Seq, or
// several ids in Cmd.Seqs: an ack with multiple=true is one command),
// OpPurge (all, or the first Cmd.Max in queue order), OpTick (expiry at
// Cmd.Now), OpSetConfig, OpForget (a publisher's sequence), OpTouch,
// OpSettleDiscards (discards.go). Apply(cmd, out) applies one and appends
// its effects to out, a slice the caller owns; the time is in the command,
// so that a log of commands replays to the same state and effects on any
// node (determinism_test.go checks it). The owner carries out each effect:
//
//   - EffDeliver: send Entry to consumer Consumer (0: to the basic.get that
//     asked). Unless the consumer is NoAck (or the get no-ack), the queue
//     holds the delivery as unacknowledged until OpSettle, OpReturn or
//     OpDiscard names its Seq.
//   - EffDeadLetter: Entry left unacknowledged for Reason (expired, maxlen,
//     rejected, delivery_limit): delete its durable record and, when the
//     queue has a dead-letter exchange, republish it there (AddDeath,
//     DeathCycle). In a queue that dead-letters at least once
//     (Config.AtLeastOnce: x-dead-letter-strategy at-least-once with
//     reject-publish) the effect is Held: the queue keeps the dead letter
//     among its discards (replicated state, counted against the length
//     limits) until the owner, its targets having confirmed it, applies
//     OpSettleDiscards (discards.go).
//   - EffSettled: Entry was acknowledged or purged: delete its durable
//     record or spilled copy.
//   - EffConfirm / EffReject: answer publish PubSeq of Publisher with
//     basic.ack / basic.nack (a length limit refused it). A resend of a
//     sequence already enqueued is confirmed again and not enqueued.
//   - EffEnqueued: the message of an OpEnqueue with ReportEnqueued was
//     kept under id Entry.Seq: store it (journal) under that id. Such an
//     enqueue also reports a refusal by a length limit (EffReject)
//     without a publisher.
//   - EffExpired: the queue went unused for Config.Expires (no consumer,
//     no OpTouch, OpAttach, OpDetach or OpGet; a tick that finds a
//     consumer counts as a use): delete it. ExpiresAt says when to tick
//     next; a use after the report takes it back (Expired).
//
// The typed methods (Publish, PublishAt, AddConsumer, RemoveConsumer,
// Checkout, Dispatch, DispatchAt, Get, GetAt, Settle, Return, ReturnAt,
// Discard, Purge, SetConfig, Expire) are the same transitions without the
// Cmd value; a single node's broker calls them directly on its hot path,
// and Apply is built on them. Publishing and dispatch are the ones the
// broker still calls typed: an enqueue through Apply costs about twice the
// enqueue itself (BenchmarkEnqueue), which a fanout pays per queue, and a
// checkout through Apply turns each delivery into an Effect naming its
// consumer by id, where Checkout hands back the consumer's record (its
// Gate, the owner's consumer) and the entry in place. Snapshot / AppendSnapshot and RestoreSnapshot
// encode and load the whole state (snapshot.go).
//
// Unacknowledged deliveries are held once, here (unacked.go): by message
// id in a list sorted by id (a map only for redeliveries overtaking newer
// ones), each lookup a look at the front or a bisection, copied once on
// removal. The owner keeps only its mapping from delivery tags to (queue,
// message id) (the broker's channel), not the deliveries.
//
// # What is not replicated state
//
// Two things a queue consults belong to the node, not to the state:
//
//   - Consumer.Gate: a limit outside the queue (the connection's outbound
//     buffer, a channel-wide prefetch) asked before each delivery by
//     Dispatch (and OpCheckout). No command sets one: the owner gives a
//     consumer attached with OpAttach its gate with SetGate, and a queue
//     restored from a snapshot has none. A broker that sets gates makes
//     dispatch depend on them. They stay callbacks, not credit in the
//     state: both limits are shared — the outbound buffer by every
//     consumer of a connection, the channel-wide prefetch by consumers of
//     several queues, each its own state machine — and change with every
//     write to the socket, so as credit they would need a command to each
//     queue per write or per ack, and a split of one shared budget among
//     queues ahead of time. Per-consumer prefetch, which is the queue's
//     own, is credit in the state (Prefetch, given back by OpSettle,
//     OpReturn, OpDiscard). In a replicated queue the leader asks the gate
//     when it proposes a checkout; followers apply the checkout's result.
//   - Paging (paging.go): the owner drops bodies of deep queues from RAM
//     (PageOut) and brings them back (PageIn). A paged-out message keeps
//     its place and counts, and can expire or be dropped, but Dispatch and
//     Get stop at a paged-out head until it is paged in: the order in
//     which messages leave never depends on paging; when they leave, and
//     so to which consumer, does. A snapshot records a paged-out message
//     without its body. An owner that sets SetDeliverPaged (a replicated
//     queue) has paged-out messages delivered like the others, with a nil
//     Entry.Msg, so that dispatch does not depend on paging at all.
//
// Streams (stream.go) are a separate state machine (Stream) of the same
// shape (stream_command.go): StreamCmd values — StreamAppend,
// StreamTakeChunk (a chunk cut at Now), StreamCommit, StreamRewind,
// StreamRetain (retention at Now), StreamStoreOffset (a named consumer's
// offset), StreamSetConfig, and StreamAppendChunk (a chunk with its
// messages, committed: the form a replicated log carries) — applied with
// Stream.Apply, effects (EffStreamAppended, EffStreamWrite,
// EffStreamRemove) returned, the log's state snapshotted with
// StreamSnapshot (stream_snapshot.go). Its cursors (StreamConsumer, by
// pointer, with credit, filters and read-ahead), the in-memory cache of
// committed messages and the offsets not yet persisted are this node's,
// not replicated state, and change through typed methods.
package queue
