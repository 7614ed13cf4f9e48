package web

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

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
		"disk_reads":       si.DiskReads,
	}
	if len(q.Members) > 0 {
		// A replicated stream: what this node's replica has written.
		it["stream"].(item)["stored_offset"] = si.StoredOffset
		reps := make([]item, 0, len(si.Replicas))
		for _, r := range si.Replicas {
			rep := item{"node": r.Node, "online": r.Online}
			if r.Online {
				rep["committed_offset"], rep["stored_offset"], rep["lag"] = r.Committed, r.Stored, r.Lag
			}
			reps = append(reps, rep)
		}
		it["stream"].(item)["replicas"] = reps
	}
}

// withQueueType is args with x-queue-type=typ (a queue PUT or imported
// with "type": "stream" or "quorum").
func withQueueType(args amqp.Table, typ string) amqp.Table {
	out := amqp.Table{"x-queue-type": typ}
	for k, v := range args {
		out[k] = v
	}
	return out
}

// putSuperStream creates a super stream (Warren's API; RabbitMQ has only
// the rabbitmq-streams CLI): body {"partitions": N} or
// {"binding_keys": ["a", "b"]}, optional "arguments" for the partition
// streams and "routing": "hash" for an exchange that hashes routing keys
// to partitions.
func (s *Server) putSuperStream(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	var body struct {
		Partitions  int            `json:"partitions"`
		BindingKeys []string       `json:"binding_keys"`
		Arguments   map[string]any `json:"arguments"`
		Routing     string         `json:"routing"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&body); err != nil {
		badRequest(w, "malformed JSON body: "+err.Error())
		return
	}
	var args amqp.Table
	if body.Arguments != nil {
		var err error
		if args, err = tableFromJSON(body.Arguments); err != nil {
			badRequest(w, err.Error())
			return
		}
	}
	if body.Routing != "" && body.Routing != "hash" {
		badRequest(w, "routing must be \"hash\" or absent")
		return
	}
	err := s.b.AddSuperStream(vhost, actingUser(p), broker.SuperStreamSpec{
		Name: pathValue(r, "name"), Partitions: body.Partitions, BindingKeys: body.BindingKeys,
		Arguments: args, HashRouting: body.Routing == "hash",
	})
	if err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// getSuperStream lists a super stream's partitions in order.
func (s *Server) getSuperStream(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	name := pathValue(r, "name")
	parts, err := s.b.SuperStreamPartitions(vhost, name)
	if err != nil {
		s.brokerError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, item{"name": name, "vhost": vhost, "partitions": parts})
}

// deleteSuperStream deletes a super stream's partitions and exchange.
func (s *Server) deleteSuperStream(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	if err := s.b.DeleteSuperStream(vhost, actingUser(p), pathValue(r, "name")); err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// streamConsumerJSON adds a stream consumer's fields: whether it is the
// active member of its group, its name and the next offset it will get.
func streamConsumerJSON(it item, c broker.ConsumerInfo) {
	it["active"] = c.Active
	if !c.Active {
		it["activity_status"] = "waiting"
	}
	it["stream_offset"] = c.StreamOffset
	if c.StreamName != "" {
		it["stream_consumer_name"] = c.StreamName
	}
}
