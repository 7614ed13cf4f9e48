package web

import "github.com/warrenmq/warren/broker"

// streamQueueJSON adds a stream queue's fields to its queue object: the
// type, RabbitMQ's committed_offset, and Warren's "stream" object with the
// log's offsets, segments and each named consumer's offset and lag.
func streamQueueJSON(it item, q broker.QueueInfo) {
	si := q.Stream
	it["type"] = "stream"
	it["committed_offset"] = si.CommittedOffset
	named := make([]item, 0, len(si.Named))
	for _, n := range si.Named {
		named = append(named, item{"name": n.Name, "offset": n.Offset, "lag": n.Lag, "consumers": n.Consumers})
	}
	it["stream"] = item{
		"first_offset":     si.FirstOffset,
		"next_offset":      si.NextOffset,
		"committed_offset": si.CommittedOffset,
		"segments":         si.Segments,
		"chunks":           si.Chunks,
		"bytes":            si.Bytes,
		"max_length_bytes": si.MaxBytes,
		"max_age_ms":       si.MaxAge,
		"consumers":        named,
	}
}
