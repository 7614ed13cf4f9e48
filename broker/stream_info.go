package broker

import (
	"sort"

	"github.com/warrenmq/warren/queue"
)

// StreamInfo describes a stream queue for management.
type StreamInfo struct {
	// FirstOffset is the first offset retained, NextOffset the offset the
	// next message will get, CommittedOffset the end of what is durable
	// (and deliverable).
	FirstOffset, NextOffset, CommittedOffset uint64
	Segments, Chunks                         int
	Bytes                                    int64
	// MaxBytes and MaxAge (ms) are the retention in force (0 = none).
	MaxBytes, MaxAge int64
	// Named lists the named consumers' tracked offsets.
	Named []StreamOffsetInfo
	// DiskReads counts the reads from disk made for consumers behind the
	// in-memory tail.
	DiskReads uint64
	// StoredOffset, for a replicated stream, is the end of what this
	// node's replica has written to its store.
	StoredOffset uint64
	// Replicas, for a replicated stream, are its members' replicas
	// (WithStreamReplicas), in member order.
	Replicas []StreamReplicaInfo
}

// StreamReplicaInfo is one member's replica of a replicated stream: its
// committed offset (chunks applied), stored offset (chunks in its store)
// and lag (committed messages it lacks: the highest committed offset of
// the replicas that answered minus its own). Online is false for a member
// that did not answer.
type StreamReplicaInfo struct {
	Node                   string
	Online                 bool
	Committed, Stored, Lag uint64
}

// StreamOffsetInfo is a named consumer's acknowledged offset and its lag:
// the committed messages after it.
type StreamOffsetInfo struct {
	Name   string
	Offset uint64
	Lag    uint64
	// Consumers is how many consumers with this name are attached (one
	// active at a time for a single-active-consumer group).
	Consumers int
}

// streamInfoLocked fills the stream's part of qi. Hold qe.mu.
func (qe *queueEntity) streamInfoLocked(qi *QueueInfo) {
	s := qe.stream.s
	qi.Ready = qe.streamMessagesLocked()
	qi.ReadyBytes = s.Bytes()
	qi.Consumers = len(s.Consumers())
	// Deliveries to stream consumers are not messages of the queue: the
	// log keeps them all (RabbitMQ counts the log only, too).
	qi.Unacked = 0
	cfg := s.Config()
	si := &StreamInfo{
		FirstOffset: s.FirstOffset(), NextOffset: s.NextOffset(), CommittedOffset: s.CommittedOffset(),
		Segments: s.Segments(), Chunks: s.Chunks(), Bytes: s.Bytes(), MaxBytes: cfg.MaxBytes, MaxAge: cfg.MaxAge,
		DiskReads: qe.stream.reads,
	}
	attached := make(map[string]int)
	for _, c := range s.Consumers() {
		if c.Name != "" {
			attached[c.Name]++
		}
	}
	for name, off := range s.NamedOffsets() {
		var lag uint64
		if end := s.CommittedOffset(); end > off+1 {
			lag = end - off - 1
		}
		si.Named = append(si.Named, StreamOffsetInfo{Name: name, Offset: off, Lag: lag, Consumers: attached[name]})
	}
	sort.Slice(si.Named, func(i, j int) bool { return si.Named[i].Name < si.Named[j].Name })
	qi.Stream = si
}

// appendStreamConsumersLocked lists a stream's consumers. Hold qe.mu.
func (qe *queueEntity) appendStreamConsumersLocked(out []ConsumerInfo) []ConsumerInfo {
	return qe.appendStreamConsumers(out, qe.stream.s.Consumers())
}

// appendStreamConsumers appends the consumers of qe's stream in cs (its
// own, or its replica's on this node; hold the lock that guards them).
func (qe *queueEntity) appendStreamConsumers(out []ConsumerInfo, cs []*queue.StreamConsumer) []ConsumerInfo {
	for _, sc := range cs {
		cons, ok := sc.Owner.(*consumer)
		if !ok {
			continue
		}
		conn, chID := consumerConn(cons)
		out = append(out, ConsumerInfo{
			VHost: qe.vhost.name, Queue: qe.name, Tag: sc.Tag,
			Connection: conn, Channel: chID,
			AckRequired: true, Exclusive: cons.Exclusive, Prefetch: sc.Prefetch, Unacked: sc.Unacked(),
			IsStream: true, StreamName: sc.Name, StreamOffset: sc.Offset, Active: sc.Active(),
		})
	}
	return out
}
