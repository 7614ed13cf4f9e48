// Package broker is the Warren server: listeners, connections, channels,
// virtual hosts, users, and the glue that drives a publish through the
// exchanges into queues and out to consumers.
//
// # Goroutines
//
// Each connection has exactly two goroutines: a reader (conn.serve), which
// reads frames and runs every channel of the connection, and a writer
// (outbound.run), which writes what the reader and the queues append to the
// connection's outbound buffer. Besides, Serve runs one accept loop per
// listener (AMQP, and amqps when configured) and the resource monitor
// (alarm.go), and waits for them. Queues have no goroutine: whoever changes a
// queue (a publisher's reader, a consumer's reader acknowledging, a writer
// that found room again) dispatches its deliveries while holding its lock.
//
// # Lock order
//
// Locks are taken in this order and never the other way round:
//
//	Broker.defMu → Broker.mu → vhost.mu → vhost.bindMu
//	vhost.mu → queueEntity.mu → channel.mu → outbound.mu
//	queueEntity.mu → linkPeer.mu, linkServer.mu → linkWriter.mu
//	QueueGroup.mu → queueEntity.mu → groupProposer.mu → replState.mu
//	QueueGroup.mu → channel.mu → outbound.mu
//	QueueGroup.mu → streamHost.mu, replState.mu
//	queueEntity.mu → streamAppender.mu; queueEntity.mu → groupProposer.mu
//
// (QueueGroup.mu is held while a data group applies a command, and the
// node's deliveries of it are written: quorumrepl.go, and for replicated
// streams streamhost.go.)
//
// # Remote queues
//
// With Config.NodeName and Config.Link (a cluster), a classic queue lives on
// one node, its home: placeQueue picks it when the queue is declared
// (x-queue-leader-locator or the queue-leader-locator policy: client-local,
// the default, or balanced), and the declare command carries it
// (defCmd.Node), so every node applies the same placement. The home node
// has a plain local queue; every other node a remote entry (queueEntity.home
// set, its queue state empty and unused): its name is taken, bindings route
// to it, the management API lists it with its node. What a client does
// with a remote entry goes to the home node over the node link (link.go,
// framing in linkproto.go), one stream per pair of brokers in each
// direction, which the home node serves (ServeLink, linkserve.go):
//
//   - a publish routed to it is appended to the link under the entry's lock
//     (no I/O: the link's writer goroutine writes many frames per write);
//     with confirms, its confirm waits for the home node's reply, sent once
//     the message is enqueued there and, if durable, journaled;
//   - basic.consume attaches a consumer on the home node whose deliveries
//     come over the link, under the same per-consumer prefetch (enforced by
//     the home queue); acks, nacks, rejects and requeues (including those of
//     a closing channel) go back as settlements of the home queue's message
//     ids; basic.get, and queue.declare (counts), purge and delete
//     (if-unused, if-empty and the count) are requests answered by the home
//     node;
//   - what the link delivered and did not have settled is returned to its
//     queue when the link ends, as a closed channel's deliveries are;
//   - while the home node is unreachable the queue answers 404 "home node
//     '…' of durable queue '…' in vhost '…' is down or inaccessible",
//     routing to it drops (or returns, with mandatory), and this node's
//     consumers of it are cancelled (basic.cancel, for clients that take
//     it); the link redials, and the queue serves again once it is back.
//
// Flow control: a link's writer holds at most 64 MiB; over 4 MiB the
// publishers that use it are held back as by a deep queue, and the home
// node's link consumers get no credit until it drains. The home node
// stops reading a link while a queue it publishes to is over the flow
// mark. Not yet: the channel-wide prefetch (basic.qos global) is not
// applied to remote consumers, nor does a no-ack remote consumer's
// delivery wait for room in its client's outbound buffer.
//
// # Queue commands and their effects
//
// A queue's state (package queue) changes through commands, applied under
// queueEntity.mu; the effects come back as values and are carried out by
// queue_effects.go under the same lock — delivery frames appended to the
// consumer's connection (channel.mu, then outbound.mu), journal records
// removed, dead letters collected — and dead letters are routed once the
// lock is released (flushDead). An unacknowledged delivery is held by the
// queue; the channel keeps its tag with the queue, message id, consumer
// and time (unacked.go), and an ack, nack or reject settles a run of one
// queue's deliveries with one command under one queueEntity.mu.
//
// # Definition commands
//
// Every change of vhosts, users, permissions, topic permissions,
// exchanges, queues, bindings, policies, operator policies and global
// parameters is a definition command (defcmd.go): the handler (an AMQP
// method, the management API and definitions import through manage.go
// and admin.go, or an automatic deletion: the exclusive queue of a closed
// connection, an auto-delete queue's last consumer gone, x-expires)
// validates what it can, proposes the encoded command to Broker.defLog, a
// DefinitionLog, holding no lock, and replies with the result of its
// apply. The single node's log (localDefinitionLog) applies at once;
// Config.DefinitionLog puts another in front (a cluster's metadata group),
// which calls ApplyDefinition on every node in log order. The apply
// (defapply.go, defapply_admin.go) decides from the definitions state and
// the command alone and assigns record ids from counters that are part of
// that state (defstore.go); SnapshotDefinitions and RestoreDefinitions
// (defsnapshot.go) carry the whole state.
//
// Broker.defMu serialises the applies so that their synchronous store
// writes happen in order with no vhost lock held; publishers never take
// it, nor does a handler while it proposes. An apply reads what it needs
// under vhost.mu (read) or Broker.mu, writes its records as one store
// batch (one sync) holding defMu alone, and only then changes memory under
// the write locks (defapply.go, topology.go): a failed write changes
// nothing, and a queue, exchange or binding is visible only once stored.
// A command of a replicated log (ApplyDefinitionAt) is durable in that log
// already: its batch is queued to the store's writer in order and not
// waited for (storeDefs), and a restart applies again what was not stored.
// conn.starvedMu, channel.starvedMu, conn.asyncMu, confirmTracker.mu,
// mgmtState.mu, chanStats.exMu (stats.go), alarms.mu, replyRegistry.mu and
// Broker.pagerMu, delayedState.mu, delayedState.winMu and dedupCache.mu
// (delayed.go, dedup.go) are leaf locks. The delayed-message scheduler
// (runDelayed) is one goroutine per broker, started and waited for by
// Serve, with at most one refill goroutine of its own reading the store;
// it reads and deletes delayed messages with no lock held and routes them
// as a publisher with confirms does (a record is deleted once its copies
// are confirmed), taking a group of them to the same local queues under
// one queueEntity.mu. At most one queueEntity.mu is held at a
// time: dead letters
// are collected under the source queue's lock and routed to the
// dead-letter exchange's queues after it is released (deadletter.go).
// Queue timers (message expiry, and the x-expires ticks: the queue's state
// machine decides when it has expired, the timer only ticks it and deletes
// it through the definitions log once qe.mu is released) and the
// consumer-timeout checker run on goroutines of their own and take the
// locks in this order.
// Permission checks (access.go) take Broker.mu alone, with no other lock
// held, before the handler takes any. Nothing blocks, does I/O, or waits on
// a Go channel while holding any of them; the writer does its socket writes
// with no lock held. Known exceptions, kept short: a persistent message is
// handed to the store's journal under its queue's lock (so the journal sees
// each queue's messages in order; Append only queues the record, but blocks
// while the journal's backlog is over its cap).
//
// Stream queues (stream.go) are the exception to "queues have no
// goroutine": each has one goroutine that hands appended messages to the
// store as chunks and commits them (confirms, dispatch, retention) — every
// change of the stream's log a queue.StreamCmd applied under
// queueEntity.mu, its effects (chunks to write or delete) carried out with
// no lock held — and
// consumers behind the in-memory tail get a short-lived reader goroutine
// per disk read. Both read Badger and wait on the journal with no lock
// held and take queueEntity.mu only to change the stream's state. The
// stream's completion list (streamState.cmu) is a leaf lock; the store's
// writer never takes queueEntity.mu.
//
// A journal append that fails is reported by the store's writer
// (OnAppendFailure); the message is dropped from its queue, if still
// ready there, on a short-lived goroutine counted with the pagers
// (durable.go), so that the queue holds what a restart recovers.
//
// Flow control: a publisher whose publish leaves a consumed queue with a
// long backlog has its reader wait (flow.go), holding no lock. A reader
// whose connection's outbound buffer is over its limit waits for its
// writer to drain it (conn.holdForOutbound), holding no lock; consumer
// deliveries stop at the cap by themselves (consumer.Acquire).
//
// A panic in a reader or writer closes its connection with 541 and is
// logged (recover.go); the broker goes on.
//
// # Replication
//
// replication.go declares what the broker needs from a replicated log, so
// that the cluster package implements it and the broker never imports it:
// CommandLog (Propose waits until a command is committed and applied on this
// node; ProposeFunc is its callback form for hot paths) and StateMachine
// (Apply in index order on one goroutine, Snapshot, Restore), with
// StateSnapshot written out while Apply goes on. LocalLog is the single-node
// CommandLog: a proposal is an entry of a store.Log, committed when the
// store's group commit has synced it (many proposals and messages share one
// fsync), then applied by the log's apply goroutine; Start replays the log
// after its last snapshot. LocalLog.mu (held while submitting an entry, so
// entries are written in index order) is taken with no broker lock held;
// LocalLog.cmu is a leaf lock, and the store's writer takes nothing else of
// the log's. Nothing is wired to it yet.
package broker
