// Package cluster makes several Warren nodes one broker: it provides what the
// replication interfaces the broker declares (broker/replication.go) need,
// which cmd/warren adapts to them, with
// Raft (github.com/hashicorp/raft), one metadata group, whose log lives in the
// node's store (store.Log) and goes through its one group-commit writer, and a
// bounded pool of data groups, whose entries each go to a segment log of the
// group's own (store.SegmentLog).
//
// What is here: a node's cluster port and identity (Node, Config), the Raft
// transport of each group over that port (Node.Transport), the Raft log and
// stable store over store.Log (RaftStore) and a data group's log store over
// store.SegmentLog (SegmentStore), the data groups of quorum queues
// (DataGroups, PlanGroups), and the metadata group (RaftLog):
// a replicated command log driving a StateMachine (cmd/warren gives it the
// broker's definitions), with forwarding to the leader, snapshots and
// membership (Join, Remove, Status), and the broker link (BrokerLink, which
// implements broker.Link and follows the metadata group's members). The
// package never imports the broker: cmd/warren adapts the broker's
// StateMachine and CommandLog to these, and wires BrokerLink and
// Node.HandleLink to the broker.
//
// # Metadata group
//
// RaftLog runs one hashicorp/raft group. Propose wraps the command in an
// envelope (a random 16-byte request id, then the command), registers a
// waiter for the id and submits it: raft's Apply on the leader, or a
// forward to the leader over an 'M' stream elsewhere. The call returns
// when this node's FSM applies the entry with that id (read your writes),
// with the state machine's result on this node. A forward whose outcome is
// unknown (the leader died, the stream broke) is retried, with the same id,
// on whichever leader comes next, until ProposeTimeout; the FSM keeps the
// ids of the last 65,536 commands (in its snapshots too) and skips an id it
// has applied, so a command committed twice takes effect once. A proposal
// that never reached a leader fails with ErrNoQuorum (no effect); one that
// may have fails with ErrUnconfirmed (outcome unknown).
//
// A follower applies an entry once the leader tells it the entry committed.
// Raft's heartbeats carry no commit index, and an idle leader sends one
// only every commit timeout; so after applying commands (forwarded or
// proposed on itself) the leader tells each follower the commit index at
// once with an AppendEntries of its own, with no entries and the last
// applied entry as the previous one, which the follower checks against its
// log as Raft does (committell.go): the forwarding follower answers its
// client, and every follower has a change acknowledged on the leader,
// within a round trip and without a sync. A follower that lacks the entry
// is told again shortly; one still behind after 100 ms, or whose entry
// differs, gets a commit notice (a log entry with a zero request id, a
// no-op for the FSM) as before. The commit timeout (500 ms) only bounds
// how late a follower learns of a commit no telling reached. A teller tells
// Raft's commit index, which covers the whole batch being applied. The
// leader has a teller per follower of its configuration, read again after
// it adds or removes a member and when it becomes the leader, so that a
// node that just joined is told from the first command after its join.
//
// A barrier (RaftLog.CatchUp) is an entry with a request id and no
// command: the FSM applies nothing for it and answers its proposer. A node
// starting in a cluster proposes one before it serves AMQP clients, and
// so serves them the definitions the cluster had when it started.
//
// Sync is the read side, and writes nothing: the leader answers an 'A'
// request with the index of the last command in its log (Raft's own
// entries, a no-op or a configuration, are not applied by the FSM and so
// not waited for), and the asking node waits until its FSM has applied up
// to there. Every proposal that returned, through any node, was in the
// leader's log first, so a node that synced sees it. The broker syncs before
// it answers that a queue, exchange, vhost or user does not exist.
//
// AwaitPeers is the write side (awaitpeers.go): after a definition change
// applied on the proposing node, it asks every other member with a live
// session to answer a 'W' request once it has applied the change, so that
// the change is answered when every node has it (a member that does not
// answer within 500 ms is skipped for 10 s).
//
// A forwarding follower does not wait for the telling: the leader answers
// a forwarded proposal, once it is committed and applied there, with the
// entry's index and term, and as soon as the follower's own log holds that
// entry (the same index and term; it checks again after each of its log
// writes) it applies its log up to it itself (raftFSM.applyThrough): by
// Raft's log matching that log is the leader's up to there, all of it
// committed. Raft's FSM goroutine, which applies under the same lock,
// then skips those entries. This takes the telling's round trip, and its
// wait behind the follower's next log write (Raft's one goroutine per
// node both stores entries and learns commits), out of a forwarded
// change's path. In a group of up to three voters the forwarding follower
// need not wait for the answer either: the leader syncs each entry it
// creates before it sends it, so an entry of the current term that the
// follower's own log write holds is on two voters, a majority, and
// committed; after each log write the follower notes the last such entry
// and a proposer waiting on it applies its log up to there
// (durablecommit.go, with the rules that keep this safe), which answers a
// forwarded change one leader commit, apply and answer sooner. The
// metadata group's log store keeps its latest 1,024
// entries in memory (raft.LogCache): replication, applies and tellings
// read the entries just written without a store transaction each.
//
// Timeouts: a heartbeat timeout of 1 s (heartbeats every 100–200 ms, a lease
// of 300 ms) keeps an idle group cheap; a leader whose process dies is
// replaced sooner: its followers see its session end (Node tells peerLost)
// and reload Raft's configuration with the heartbeat and election timeouts
// at the lease timeout (the least Raft allows) until a new leader is known
// (failoverLoop), and a proposal that could not leave its node is retried
// every 10 ms, so it reaches the new leader as soon as it is known.
//
// Snapshots are raft's (FileSnapshotStore, SnapshotThreshold entries
// apart, TrailingLogs kept); each starts with the last command index and
// the remembered request ids. The founding node (Start with bootstrap and
// no Raft state) takes a first snapshot of its state once it leads, with
// the log compacted behind it, and accepts joins only then: its definitions
// from before the cluster are in no log entry, so joining nodes must start
// from that snapshot.
//
// Restart: the broker records with each stored change the index of the
// entry (store.UpdateApplied; queued through the store's group-commit
// writer, not synced one by one: the entry is durable in the log already),
// and skips entries and snapshots up to the index it recovered
// (broker/defreplication.go), so raft's replay after a restart applies
// nothing twice and applies again what a crash kept from being stored.
//
// Membership requests go to the leader over 'M' streams: join (AddVoter,
// asked of a seed, which forwards to its leader), remove (RemoveServer),
// and info (a node's own status, for Status).
//
// # Data groups
//
// Quorum queues are replicated in a bounded pool of data groups (ids from
// 1; datagroup.go), each a RaftLog like the metadata group, whose state
// machine is the broker's QueueGroup (every quorum queue placed in the
// group). Their plan — which nodes are the members of each group, the
// first the preferred leader — is made by PlanGroups and recorded through
// the metadata group (cmd/warren keeps it as a global parameter); every
// member founds the group with that same configuration
// (RaftLogConfig.Servers), so a data group starts empty, without a join or
// a first snapshot. A group runs only while it has work: cmd/warren
// starts (Ensure) the groups that hold a quorum queue, and a node that
// proposes to a group it does not run yet starts it then (Wake, on a
// goroutine of its own; proposals wait for the start), so a planned group
// with no queue costs nothing (no Raft, no heartbeats). A group is not
// stopped again when its last queue goes (not done yet).
// DataGroups runs the groups a node is a member of and
// hands the leadership of each to its preferred member whenever that
// member is a voter connected to the leader, so leaders are spread over
// the nodes (and a node that comes back takes its groups back). A new
// group is led by its preferred member from the first election: that
// member, until a leader is known, elects with failoverLoop's short
// timeouts (electFirst), the others with the heartbeat timeout, so a queue
// placed client-local is led where it was declared from its first
// publish, not only once the group has been quiet long enough to hand it
// over.
// Proposals to a data group are forwarded to its leader on 'G' streams,
// which name the group, with the same retries and request-id
// deduplication as the metadata group's. On the leader, Begin puts a
// proposal in Raft's log without waiting for the ones before it (the
// broker keeps several entries of a group in flight so), and never
// submits it again: a node's entries apply in the order it began them, or
// not at all; Raft's apply channel is buffered (BatchApplyCh), so the
// entries begun while the leader writes its log go into its next write
// together. Membership changes of a data
// group (a member replaced, the group grown or shrunk) are not done yet.
//
// Streams are replicated in the same data groups, not in a group each:
// the broker's group state machine holds their logs beside the quorum
// queues (broker/streamgroup.go). A group per stream would cost its own
// heartbeats and per-peer pipelines for every stream, and measured no
// faster on a loaded node (docs/streams.md, "Replication in a cluster"),
// while sharing a group batches more commands per entry and fsync.
//
// # Cluster port
//
// Each node listens on one TCP port (Config.ClusterAddr) and keeps one
// connection per peer, multiplexed with yamux (github.com/hashicorp/yamux):
// every Raft group and the broker link are streams of that one session. A
// node dials a peer the first time a stream to it is needed; concurrent
// callers share the dial. When two nodes dial each other at once, both keep
// the connection dialed by the node with the smaller name and close the other;
// a connection from a new incarnation of a peer (it restarted) replaces the old
// one. yamux pings each session every 3 s; one whose ping goes unanswered
// for 10 s is closed, so a peer cut off by a partition is seen gone within
// about 13 s (and redialed once it answers again); a killed peer's session
// ends with its connection. Sessions are filed by the peer's advertised address, which is its Raft
// server address in every group. yamux writes a data frame as its header,
// then its body; the session's connection (frameConn, coalesce.go) holds the
// header back and writes both at once (writev), so that a frame — a Raft
// heartbeat, its answer — is one write and one segment, not two.
//
// # Handshake
//
// A connection carries nothing before its handshake succeeds (handshake.go),
// inside mutual TLS when Config.TLS is set:
//
//	client → server  hello: "WRNC", version, cluster id, node name,
//	                 advertised address, incarnation, 32-byte random nonce
//	server → client  its hello (with status "different cluster" and the
//	                 connection closed, if the cluster ids differ), then its
//	                 proof HMAC-SHA256(secret, "… server" ‖ client hello ‖ server hello)
//	client → server  its proof, the same with "client" (or "auth failed" when
//	                 the server's proof does not match its secret)
//	server → client  ok, or "auth failed" and the connection closed
//
// Each side proves it holds the shared secret (Config.SecretFile, like
// RabbitMQ's Erlang cookie) over both fresh nonces; the secret never crosses
// the wire and a recorded handshake cannot be replayed. A peer that fails is
// closed with a log line "refused cluster peer" naming its address, its
// claimed name and the reason (a different cluster id, a different secret);
// repeats of the same refusal are logged at Warn once a minute. A refused peer
// gets no stream, so no Raft RPC, definition or message.
//
// # Streams
//
// The opener of a yamux stream writes its kind first:
//
//	'R' group(8, big-endian)   a Raft connection of that group
//	'L'                        the node-to-node broker link (Node.HandleLink,
//	                           Node.DialLink; the handler gets the peer's name)
//	'M' op(1) len(4) payload   one request of the metadata group (raftrpc.go),
//	                           answered status(1) len(4) payload
//	'G' group(8) op(1) len(4) payload
//	                           the same, for data group group (datagroup.go)
//
// A Raft stream for a group the node does not run, or a stream of an unknown
// kind, is closed.
//
// # Broker link
//
// BrokerLink is broker.Config.Link: Dial(node) opens an 'L' stream to the
// named node (its address from SetPeer), and that node's HandleLink
// handler gives the stream to its broker (broker.Broker.ServeLink). Each
// broker opens one stream to each peer it needs, for the queues homed
// there. The broker owns what a link stream carries (broker/linkproto.go),
// since this package never imports it:
//
//	frame   length(4, big-endian, of type and payload) | type(1) | payload
//	fields  integers as uvarints; strings and bytes as uvarint length and
//	        bytes; flags as one byte
//
// Requests, from the node whose client acts: 'P' publish (request id, 0 for
// none; queue id, vhost, queue; exchange, routing key, content header,
// body), 'C' consume (handle, queue, tag, no-ack/exclusive flags,
// prefetch, priority), 'X' cancel, 'S' settle (ack, requeue or discard;
// queue; message ids), 'G' get, 'Q' status (ready messages and consumers),
// 'U' purge. From the queue's home node: 'R' reply (request id, AMQP reply
// code or 0, text, two counts, and for a get the message), 'D' delivery
// (handle, message id, redelivered, message), 'K' consumer cancelled.
// Queues are named by id, vhost and name, so a queue deleted and declared
// again is not mistaken for the old one. Frames are appended to a buffer
// under a lock and written by one goroutine per stream, many frames per
// write; the buffer is bounded (publishers held back over 4 MiB, refused
// over 64 MiB), and yamux's per-stream window carries the backpressure
// of a home node that stops reading.
//
// # Raft transport
//
// Node.Transport(group) is Raft's own NetworkTransport over a StreamLayer
// whose Dial opens an 'R' stream on the session to the target and whose
// Accept returns the group's streams that peers opened. We chose this over a
// Transport of our own because it reuses Raft's tested RPC encoding,
// heartbeat fast path, AppendEntries pipelining and streamed InstallSnapshot
// unchanged, and its per-target connection pool becomes a pool of yamux
// streams, which cost a few KiB each and no TCP connection or handshake: the
// pool (MaxPool 3 per group and target) is the only per-group cost on the
// wire. The price is Raft's per-connection goroutines (one per accepted
// stream), which the bounded number of groups keeps small.
//
// # Storage
//
// RaftStore keeps the metadata group's log entries and its term and vote in
// one ordered log of the node's store (store/doc.go), behind a cache of the
// latest entries. A data group keeps its term and vote there too, but its
// entries — a quorum queue's publishes, a stream's appended chunks — in a
// store.SegmentLog in its directory (DIR/g<id>/log; SegmentStore): an append
// is one write and one fdatasync of a file, where a Badger write synced the
// memtable's mapped log (msync, 0.6–0.8 ms a call under a stream's load here,
// against ~0.2 ms) and compacted the entries afterwards. A node that kept a
// group's entries in the store (an older version) moves them into the
// segment log when it starts the group (openSegmentStore).
//
// A data group's leader does not wait for its own write before it sends new
// entries to the followers. Warren builds hashicorp/raft from a copy of
// its own (third_party/raft, README.warren.md) with two changes. First, a log
// store that implements raft.StagingLogStore (SegmentStore does) is handed
// each batch of new entries first (StageLogs: the segment log serves them
// from memory), the replicators are woken, and only then does the leader
// write and sync the batch, while the followers write theirs. The leader
// counts itself toward the commit quorum once its write has returned, so
// an entry still commits only when a majority holds it durably; a failed
// write drops the staged entries, restores the leader's last index and
// steps it down, as upstream (staging_test.go). An append's round trip is
// then one sync shorter. The leader loop yields between waking the
// replicators and its write, so that they send before its thread blocks in
// the sync (the woken replicators wait on that thread's P): 131–150 µs
// from staging to sending under one stream's load, against 331–350 µs
// without. The metadata group's store does not stage: its early commit
// of forwarded commands (durablecommit.go) relies on the leader having
// written an entry before sending it. Second, a leader can be
// told of each commit as Raft counts it (raft.Config.CommitHook): a data
// group's leader calls the callbacks BeginCommitted registered for the
// entries up to the new commit index, in order, on the goroutine that
// counted it (leaderCommitted), before its main loop and FSM goroutine
// get to the entries; a replicated stream's appender answers its
// publishers there (TestRaftLogBeginCommitted). BeginFramed takes a
// command built behind CommandHeadroom free bytes and writes the request
// id there, so the broker's stream appends reach the log without a copy.
// Snapshots use
// Raft's FileSnapshotStore in a directory per group. A data
// group's snapshot carries the bodies its members keep in their stores
// rather than in RAM (broker/quorumbodies.go), streamed into the snapshot;
// its log is truncated behind each snapshot like the metadata group's
// (SnapshotThreshold, TrailingLogs), and a member further behind than the
// trailing entries catches up by snapshot (quorum_depth_test.go).
package cluster
