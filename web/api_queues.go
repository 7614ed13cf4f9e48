package web

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/warrenmq/warren/broker"
)

// Queues: GET /api/queues[/vhost[/name]], PUT, DELETE (if-empty,
// if-unused), DELETE .../contents (purge), POST .../get.

func (s *Server) getQueues(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.optionalVHost(w, r, p)
	if !ok {
		return
	}
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	qs, err := s.b.Queues(vhost)
	if err != nil {
		s.brokerError(w, err)
		return
	}
	visible := s.visibleVHosts(p)
	qs = slices.DeleteFunc(qs, func(q broker.QueueInfo) bool { return !visible(q.VHost) })
	// A queue homed on another node: its counts are that node's.
	s.b.WithHomeCounts(qs)
	s.b.WithStreamReplicas(qs)
	writeListOf(w, r, qs, func(q broker.QueueInfo) string { return q.Name }, queueSorts,
		func(q broker.QueueInfo) item { return s.queueJSON(q, rs) })
}

// queueSorts are the sort keys a queue list is ordered by without the
// queues' JSON (writeListOf); each orders as compareAny orders the JSON
// field.
var queueSorts = map[string]func(a, b broker.QueueInfo) int{
	"name":  func(a, b broker.QueueInfo) int { return strings.Compare(a.Name, b.Name) },
	"vhost": func(a, b broker.QueueInfo) int { return strings.Compare(a.VHost, b.VHost) },
	"messages": func(a, b broker.QueueInfo) int {
		return cmp.Compare(a.Ready+a.Unacked, b.Ready+b.Unacked)
	},
	"messages_ready":          func(a, b broker.QueueInfo) int { return cmp.Compare(a.Ready, b.Ready) },
	"messages_unacknowledged": func(a, b broker.QueueInfo) int { return cmp.Compare(a.Unacked, b.Unacked) },
	"consumers":               func(a, b broker.QueueInfo) int { return cmp.Compare(a.Consumers, b.Consumers) },
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	q, err := s.b.Queue(vhost, pathValue(r, "name"))
	if err != nil {
		s.brokerError(w, err)
		return
	}
	one := []broker.QueueInfo{q}
	s.b.WithHomeCounts(one)
	s.b.WithStreamReplicas(one)
	q = one[0]
	it := s.queueJSON(q, rs)
	conss := []item{}
	for _, c := range s.b.QueueConsumers(vhost, q.Name) {
		conss = append(conss, consumerJSON(c, ""))
	}
	it["consumer_details"] = conss
	writeJSON(w, http.StatusOK, it)
}

func (s *Server) putQueue(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	args, err := tableFromJSON(body["arguments"])
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	switch t, _ := body["type"].(string); t {
	case "", "classic":
	case "stream", "quorum":
		args = withQueueType(args, t)
	default:
		badRequest(w, "unsupported queue type '"+t+"'")
		return
	}
	name := pathValue(r, "name")
	_, lookupErr := s.b.Queue(vhost, name)
	durable := true
	if _, set := body["durable"]; set {
		durable = boolField(body, "durable")
	}
	err = s.b.DeclareQueue(vhost, actingUser(p), broker.QueueSpec{
		Name: name, Durable: durable, AutoDelete: boolField(body, "auto_delete"), Arguments: args,
	})
	if err != nil {
		s.brokerError(w, err)
		return
	}
	if lookupErr == nil { // it existed: an equivalent redeclare
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	q := r.URL.Query()
	_, err := s.b.DeleteQueue(vhost, pathValue(r, "name"), q.Get("if-unused") == "true", q.Get("if-empty") == "true")
	if err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) purgeQueue(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	if _, err := s.b.PurgeQueue(vhost, pathValue(r, "name")); err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getMessages is POST /api/queues/vhost/name/get: count, ackmode
// (ack_requeue_true, ack_requeue_false, reject_requeue_true,
// reject_requeue_false), encoding (auto or base64), truncate.
func (s *Server) getMessages(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	var body struct {
		Count    json.Number `json:"count"`
		AckMode  string      `json:"ackmode"`
		Encoding string      `json:"encoding"`
		Truncate json.Number `json:"truncate"`
		Requeue  any         `json:"requeue"`
	}
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	count := 1
	if body.Count != "" {
		n, err := strconv.Atoi(body.Count.String())
		if err != nil || n < 0 {
			badRequest(w, "count must be a non-negative integer")
			return
		}
		count = n
	}
	var requeue bool
	switch body.AckMode {
	case "ack_requeue_true", "reject_requeue_true":
		requeue = true
	case "ack_requeue_false", "reject_requeue_false":
	case "":
		requeue = body.Requeue == true || body.Requeue == "true"
	default:
		badRequest(w, "ackmode must be ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false")
		return
	}
	switch body.Encoding {
	case "", "auto", "base64":
	default:
		badRequest(w, "encoding must be auto or base64")
		return
	}
	truncate := -1
	if body.Truncate != "" {
		if n, err := strconv.Atoi(body.Truncate.String()); err == nil && n >= 0 {
			truncate = n
		}
	}
	msgs, err := s.b.Get(vhost, actingUser(p), pathValue(r, "name"), count, requeue)
	if err != nil {
		s.brokerError(w, err)
		return
	}
	out := make([]item, 0, len(msgs))
	for _, m := range msgs {
		payload := m.Body
		if truncate >= 0 && len(payload) > truncate {
			payload = payload[:truncate]
		}
		enc, text := "string", string(payload)
		if body.Encoding == "base64" || !utf8.Valid(payload) {
			enc, text = "base64", base64.StdEncoding.EncodeToString(payload)
		}
		out = append(out, item{
			"payload_bytes":    len(m.Body),
			"redelivered":      m.Redelivered,
			"exchange":         m.Exchange,
			"routing_key":      m.RoutingKey,
			"message_count":    m.MessageCount,
			"properties":       propertiesJSON(m.Properties),
			"payload":          text,
			"payload_encoding": enc,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getQueueBindings(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	name := pathValue(r, "name")
	if _, err := s.b.Queue(vhost, name); err != nil {
		s.brokerError(w, err)
		return
	}
	s.writeBindings(w, r, vhost, func(b broker.BindingInfo) bool {
		return !b.DestinationIsExchange && b.Destination == name
	})
}
