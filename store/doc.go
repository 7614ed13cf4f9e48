// Package store is the node's durable storage, on Badger (github.com/dgraph-io/badger/v4):
// definitions (vhosts, users, permissions, topic permissions, exchanges, queues, bindings,
// policies), the journal of durable queues' messages, and ordered logs (logs.go), one per
// replication group, that a Raft LogStore and StableStore can wrap. Beside Badger, a
// SegmentLog (segments.go) is an ordered log in append-only files of a directory of its
// own, for logs whose entries carry message bodies. It owns no broker logic and imports
// nothing of Warren's (nor any Raft library).
//
// # Goroutines
//
// Open starts three goroutines, all stopped and waited for by Close: the journal writer
// (writeLoop), value-log GC (gcLoop) and the trimmer of mapped file pages (trimLoop,
// trim_linux.go). Badger runs its own (compactors, memtable
// flush, its write pipeline), also stopped by Close.
//
// Badger memory-maps its tables, value-log and memtable-log files, and every page
// written or read would stay in the process's resident set (RSS grew with every byte
// written). The trimmer pages them out with madvise(MADV_PAGEOUT), which never discards
// data: value-log and memtable-log mappings every 200 ms (all of a finished file, all
// but the last 2 MiB below the write tail of the newest), tables every second. So RSS
// follows what is queued in memory, not what was written; Linux only (5.4 or later).
//
// The journal writer is the one goroutine that writes messages (and stream chunks:
// AppendStreamChunk writes a chunk's messages and header as two records in order, done
// running after the header's commit; they are written, and fail, together). Append,
// Remove and MarkDelivered only queue an op; the writer takes everything queued at once
// and writes it as one Badger transaction (split only when Badger's per-batch limits or
// Config.MaxBatch say so) with one sync: group commit. A record Badger would refuse is
// refused before it is queued (ErrTooLarge), and a group commit that fails anyway is
// written again op by op, so that one bad op fails alone and its neighbours (other
// publishers' messages, removals, delivery marks) are written; OnAppendFailure tells
// the owner of a message that failed, and SetJournalFault lets tests make writes fail.
// While one commit syncs, the next one gathers. Append callbacks run on the writer after their commit is durable. Removals
// and delivery marks have no sync of their own: they ride with the next commit, or are
// written on their own after ~200 ms if no append or Flush comes (a crash before that
// redelivers the message, which AMQP allows). The bytes of appends submitted but not yet
// completed are capped (64 MiB); past it Append blocks: the journal's backpressure.
//
// Ordered logs (Log, logs.go) go through the same writer: Log.Append queues a batch of
// entries (tied: they succeed or fail together within a commit, and the entries written
// are always a prefix) and calls done once they are durable; AppendWait, DeleteRange,
// SetValue and SetUint64 wait for their commit. So entries of many logs, messages and
// stream chunks share one sync per batch. DeleteRange deletes a prefix from its low end and
// a suffix from its high end, each entry's record before its chunks, so a deletion cut
// short leaves a contiguous log.
//
// Definitions are written synchronously by the caller, one small transaction (one
// sync) per Put, Delete or Update; Update writes all the records of one change
// together, all or nothing. UpdateAppliedQueued (for a replicated log's state
// machine, whose log holds the change durably already) queues the same change to the
// journal writer as one tied group of ops instead and returns at once; the direct
// writes wait for queued ones first, so definition writes stay in order. A tied group
// (a change, a stream chunk's two records) goes into one group commit when it fits.
//
// # Keys
//
// Ids are fixed-width big-endian uint64 so that prefix scans return them in numeric
// order. Names live only in values and are never parsed out of keys.
//
//	"\x00schema-version"            schema version of the whole layout (currently 3)
//	'c' kind(1)                     last id assigned for kind (never reused)
//	'd' kind(1) id(8)               definition of kind with id
//	'm' queueID(8) seq(8)           message seq of durable queue queueID
//	'm' queueID(8) seq(8) 'b' i(4)  chunk i of that message's body, when over 4 MiB
//	'm' queueID(8) seq(8) 'd'       delivery mark of that message (sorts after its chunks)
//	'p' pageID(8) seq(8)            message paged out of RAM by Spill (paging.go); these
//	                                live as long as the process: Open deletes them all;
//	                                a large body has chunks here too ('b' i(4))
//	'q' group(2) queue(6) seq(8)    body of message seq of a replicated quorum queue
//	                                (ReplID: data group, queue definition id), this
//	                                member's copy beyond its memory window
//	                                (replbodies.go); written unsynced (the group's log
//	                                and snapshots hold it durably), dropped by group
//	                                when a snapshot is restored; chunks as above
//	's' queueID(8) 'c' offset(8)    header of the stream chunk starting at offset
//	's' queueID(8) 'd' offset(8)    messages of that chunk
//	's' queueID(8) 'd' offset(8) 'b' i(4)  chunk i of those messages, when over 4 MiB
//	's' queueID(8) 'o' name         acknowledged offset of named stream consumer name
//	's' queueID(8) 'h' sha256(32)   the same for a name over 245 bytes (the name in the value)
//	'r' logID(8) 'e' index(8)       entry index of ordered log logID
//	'r' logID(8) 'e' index(8) 'b' i(4)  chunk i of that entry's data, when over 4 MiB
//	'r' logID(8) 'v' key            value key of that log (Raft's term and vote; up to
//	                                245 bytes of key)
//	'w' due(8) seq(8) exchangeID(8) delayed message due at unix ms due (delayed.go)
//	'w' ... exchangeID(8) 'b' i(4)  chunk i of its body, when over 4 MiB
//
// kind is Kind: 1 vhost, 2 user, 3 permission, 4 exchange, 5 queue, 6 binding, 7 policy,
// 8 topic permission, 9 global parameter.
// A queue's journal records all share the prefix 'm' queueID(8), which RemoveQueue
// deletes. A stream queue's records share the prefix 's' queueID(8), which RemoveStream
// deletes; a stream's segments are runs of chunks (the segment number is in each chunk
// header) and retention deletes a segment's chunks with RemoveStreamChunks. A log's
// records share the prefix 'r' logID(8), which Log.Remove deletes.
//
// Open writes the schema-version key into a new database and refuses a database whose
// version it does not know (ErrSchemaVersion). Version 2 added chunked bodies, version 3
// the ordered logs; both only added records, so Open upgrades a version-1 or -2
// database in place: it deletes any key under 'r' (reserved before, never written) so
// every log starts empty, and writes the current version, which older builds refuse.
// Version 4 changed no record (a data group's log entries moved out of the database,
// into segment logs the cluster fills when it starts the group), so a version-3
// database is only marked 4, its logs kept. Messages,
// marks, streams and definitions are read as they are. A future layout change bumps the
// version and migrates older databases in Open (upgrade, store.go).
//
// # Values
//
// Every value is a record:
//
//	version(1) crc32c(4, big-endian) payload
//
// version is the record format: 1, or 2 for a message (or stream chunk data) whose
// bytes are in chunk records. crc32c is CRC-32C (Castagnoli) of the
// version byte followed by the payload. A record whose checksum fails, whose version is
// unknown or whose payload does not decode is corrupt: it is logged and skipped
// (LoadDefinitions counts it in Definitions.Corrupt, ScanQueue in ScanStats.Corrupt) and
// recovery goes on with the rest. In payloads, str and bytes are a uvarint length and
// that many bytes, bool is one byte 0 or 1, int is a zigzag varint, strs is a uvarint
// count of str. Payloads by key:
//
//	schema-version, counter   uvarint
//	message (also a spilled or
//	replicated body)          uvarint deliveries, uvarint expires (unix ms, 0 = never),
//	                          str exchange, str routing key,
//	                          bytes content header, body (the rest of the value)
//	message (version 2)       the same up to the content header, then uvarint body
//	                          length, uvarint chunk length (large.go)
//	message body chunk        the chunk's bytes (the whole payload)
//	delivery mark             uvarint deliveries
//	stream chunk header       uvarint count, int timestamp (unix ms), uvarint body bytes,
//	                          uvarint segment, uvarint flags (1 a message has no filter
//	                          value, 2 too many filter values to list, 4 data in chunk
//	                          records), strs filter values, with flag 4 uvarint chunks
//	stream chunk messages     count × (str exchange, str routing key, bytes content header,
//	                          bytes body, str filter value); over 4 MiB a version-2
//	                          record of uvarint length, uvarint chunk length, and
//	                          those bytes in chunk records
//	stream offset             uvarint offset ('o'); uvarint offset, str name ('h')
//	log entry                 uvarint term, byte type, int appended-at (unix ns),
//	                          bytes extensions, data (the rest of the value); over
//	                          4 MiB of data a version-2 record ending in uvarint data
//	                          length, uvarint chunk length, the data in chunk records
//	log value                 the value's bytes (the whole payload), chunked the same
//	                          way over 4 MiB
//	delayed message           str vhost, str exchange, str routing key, bytes content
//	                          header, body (the rest; chunked like a log entry over 4 MiB)
//	vhost                     str name, str description, strs tags,
//	                          uvarint n, n × (str key, int value) limits sorted by key
//	user                      str name, bytes password hash, str hash algorithm, strs tags
//	                          [, uvarint n, n × (str key, int value) limits sorted by key:
//	                          left out when the user has none, as before users had limits]
//	permission                str user, str vhost, str configure, str write, str read
//	topic permission          str user, str vhost, str exchange, str write, str read
//	global parameter          str name, bytes value (JSON)
//	exchange                  str vhost, str name, str type, bool durable,
//	                          bool auto-delete, bool internal, bytes args
//	queue                     str vhost, str name, bool durable, bool exclusive,
//	                          bool auto-delete, bytes args, str type
//	binding                   str vhost, str source, str destination,
//	                          bool destination is exchange, str routing key, bytes args
//	policy                    str vhost, str name, str pattern, str apply-to,
//	                          int priority, bytes definition, bool operator
//
// A definition's id is in its key only. MarkDelivered writes a mark record instead of
// rewriting the message, so a big body is never copied again; the store remembers which
// messages have marks (from MarkDelivered and ScanQueue) so that Remove deletes the mark
// too, and ScanQueue ignores a mark whose message is gone.
//
// # Badger tuning
//
// The store lives inside a broker whose idle RSS target is 25 MB, so Badger is tuned
// small (options.go):
//   - MemTableSize 2 MiB, NumMemtables 3: the memtable arenas (~2.6 MiB each with
//     Badger's batch headroom) are among the largest allocations; two may wait for their
//     flush, so bursts of writes (16 publishers with confirms) rarely stall. Level-0
//     tables are memtable-sized, and the builder of one grows to hold it: 8 MiB memtables
//     cost ~80 MiB more RSS with a million queued messages, and 4 MiB ones ~14 MiB more
//     heap than 2 MiB with a million delayed messages (40 against 26 MiB live after a GC).
//     Badger limits one transaction to 15% of it (~300 KiB), so big group commits are
//     split into a few transactions.
//   - ValueThreshold 512 bytes: small messages (and all definitions) stay in the LSM
//     tree, written once to the WAL and once to a table, and a queue drained before a
//     flush costs little; bigger bodies go to the value log, written once, with only a
//     pointer in the tree. With 4 KiB here, a million queued 1 KiB messages went through
//     memtables, L0 tables and compactions: 3× slower to publish and ~100 MiB more heap
//     in Badger's table builders.
//   - ValueLogFileSize 64 MiB: GC reclaims space in files of this size (the default 1 GiB
//     would keep a drained queue's space until a whole GiB had been written). It also
//     caps one value at 64 MiB: bodies over 4 MiB are cut into chunk records.
//   - No compression, BlockCacheSize 0, IndexCacheSize 0: uncompressed tables are read
//     straight from their mmap (the OS page cache does the caching) and their indexes
//     stay in the mmap, not the Go heap; no ristretto caches are allocated.
//   - NumCompactors 2 (Badger's minimum), L0 4 tables before compaction (stall at 12),
//     base level 16 MiB, 512 KiB tables at the base level, twice as big each level below.
//     A table builder starts at twice its table's size and Badger pools up to 8 of them
//     (giving one back every 2 s without compactions): with 1 MiB tables the pool held
//     ~24 MiB of a node's heap with a million queued messages, with 512 KiB ~18 MiB. Each
//     table built also takes a transient 3 MiB index builder, so much smaller tables would
//     trade pooled memory for garbage.
//   - SyncWrites unless Config.NoSync: every Badger write is synced, and the writer makes
//     one write per group commit, so this is one sync per batch. (Calling DB.Sync after
//     unsynced writes instead would miss a memtable rotated in between.)
//   - DetectConflicts off (one writer, no read-modify-write transactions), metrics off,
//     Badger's logger adapted to zap at warning level.
//   - Value-log GC every Config.GCInterval (1 min), or sooner (checked every 5 s) once
//     there are more than 4 value-log files, RunValueLogGC(0.5) in a loop until Badger
//     reports nothing to rewrite. 4 KiB persistent messages consumed at once otherwise
//     left up to a minute of writes (~1.4 GB) on disk.
package store
