package web

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// tableFromJSON turns decoded JSON (numbers as json.Number) into an AMQP
// field table: integers become long, other numbers double.
func tableFromJSON(v any) (amqp.Table, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("arguments must be an object")
	}
	if len(m) == 0 {
		return nil, nil
	}
	t := make(amqp.Table, len(m))
	for k, e := range m {
		t[k] = valueFromJSON(e)
	}
	return t, nil
}

func valueFromJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
		return x
	case map[string]any:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = valueFromJSON(e)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = valueFromJSON(e)
		}
		return out
	}
	return v
}

// propertiesJSON renders message properties with RabbitMQ's field names,
// omitting absent ones.
func propertiesJSON(p amqp.Properties) map[string]any {
	out := map[string]any{}
	set := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	set("content_type", p.ContentType)
	set("content_encoding", p.ContentEncoding)
	set("correlation_id", p.CorrelationID)
	set("reply_to", p.ReplyTo)
	set("expiration", p.Expiration)
	set("message_id", p.MessageID)
	set("type", p.Type)
	set("user_id", p.UserID)
	set("app_id", p.AppID)
	set("cluster_id", p.ClusterID)
	if p.DeliveryMode != 0 {
		out["delivery_mode"] = p.DeliveryMode
	}
	if p.Priority != 0 {
		out["priority"] = p.Priority
	}
	if p.Timestamp != 0 {
		out["timestamp"] = p.Timestamp
	}
	if p.Headers != nil {
		out["headers"] = amqp.TableJSON(p.Headers)
	}
	return out
}

// propertiesFromJSON reads message properties as the publish endpoint
// takes them.
func propertiesFromJSON(m map[string]any) (amqp.Properties, error) {
	var p amqp.Properties
	str := func(k string) string {
		s, _ := m[k].(string)
		return s
	}
	p.ContentType = str("content_type")
	p.ContentEncoding = str("content_encoding")
	p.CorrelationID = str("correlation_id")
	p.ReplyTo = str("reply_to")
	p.Expiration = str("expiration")
	p.MessageID = str("message_id")
	p.Type = str("type")
	p.UserID = str("user_id")
	p.AppID = str("app_id")
	p.ClusterID = str("cluster_id")
	num := func(k string, limit uint64) (uint64, error) {
		v, ok := m[k]
		if !ok || v == nil {
			return 0, nil
		}
		var s string
		switch x := v.(type) {
		case json.Number:
			s = x.String()
		case string:
			s = x
		case float64:
			s = strconv.FormatFloat(x, 'f', -1, 64)
		default:
			return 0, fmt.Errorf("property %s: not a number", k)
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n > limit {
			return 0, fmt.Errorf("property %s: invalid value %q", k, s)
		}
		return n, nil
	}
	dm, err := num("delivery_mode", 2)
	if err != nil {
		return p, err
	}
	pr, err := num("priority", 255)
	if err != nil {
		return p, err
	}
	ts, err := num("timestamp", math.MaxUint64)
	if err != nil {
		return p, err
	}
	p.DeliveryMode, p.Priority, p.Timestamp = uint8(dm), uint8(pr), ts
	if h, ok := m["headers"]; ok && h != nil {
		t, err := tableFromJSON(h)
		if err != nil {
			return p, fmt.Errorf("headers: %v", err)
		}
		p.Headers = t
		if p.Headers == nil {
			p.Headers = amqp.Table{}
		}
	}
	return p, nil
}

// queueEntryBytes and queueBaseBytes are the per-message and per-queue
// RAM of a queue's memory estimate: a ready-list or unacknowledged entry
// with its message record, and the queue's own structures.
const (
	queueEntryBytes = 160
	queueBaseBytes  = 2048
)

func (s *Server) queueJSON(q broker.QueueInfo, rs ranges) item {
	v := s.rates.view(queueKey(q), rs)
	vals := queueValues(q)
	pol, opPol, effective := s.b.PolicyMatch(q.VHost, q.Name, true)
	// Sized for the fields below and their details: a list of thousands
	// of queues builds one per queue.
	it := make(item, 64)
	it["name"] = q.Name
	it["vhost"] = q.VHost
	it["durable"] = q.Durable
	it["auto_delete"] = q.AutoDelete
	it["exclusive"] = q.Exclusive
	it["arguments"] = amqp.TableJSON(q.Arguments)
	it["node"] = nodeName()
	if q.Node != "" {
		it["node"] = q.Node
	}
	it["state"] = "running"
	if q.Members != nil {
		// A quorum queue replicated in a data group, as RabbitMQ shows
		// one: its leader, members and the members online.
		it["leader"], it["members"], it["online"] = q.Leader, q.Members, nonNilStrings(q.Online)
		if q.Unavailable {
			it["state"] = "minority"
		}
	} else if q.Type == "quorum" || q.Type == "stream" {
		// On a single node: the node is its only member.
		self := it["node"].(string)
		it["members"], it["online"] = []string{self}, []string{self}
		if q.Type == "quorum" {
			it["leader"] = self
		}
	}
	it["type"] = orDefault(q.Type, "classic")
	it["policy"] = orNil(pol)
	it["operator_policy"] = orNil(opPol)
	it["effective_policy_definition"] = amqp.TableJSON(effective)
	it["exclusive_consumer_tag"] = nil
	it["recoverable_slaves"] = nil
	it["message_bytes"] = q.ReadyBytes + q.UnackedBytes
	it["message_bytes_ready"] = q.ReadyBytes
	it["message_bytes_unacknowledged"] = q.UnackedBytes
	it["messages_persistent"], it["message_bytes_persistent"] = persistentCounts(&q)
	it["messages_paged_out"] = q.PagedOut
	it["message_bytes_paged_out"] = q.PagedOutBytes
	it["messages_ram"] = q.Ready - q.PagedOut + q.Unacked
	it["messages_ready_ram"] = q.Ready - q.PagedOut
	it["messages_unacknowledged_ram"] = q.Unacked
	it["message_bytes_ram"] = q.ReadyBytes - q.PagedOutBytes + q.UnackedBytes
	it["consumers"] = q.Consumers
	// Per-channel and per-exchange details RabbitMQ lists when its
	// detailed statistics are on (they are off by default): none here.
	it["deliveries"], it["incoming"] = []any{}, []any{}
	// memory: an estimate of what the queue holds in RAM — the bodies
	// of its resident and unacknowledged messages and a per-message
	// index entry (headers and properties not counted).
	inRAM := q.Ready - q.PagedOut + q.Unacked
	it["memory"] = q.ReadyBytes - q.PagedOutBytes + q.UnackedBytes + int64(inRAM)*queueEntryBytes + queueBaseBytes
	if q.Type != "stream" {
		// As RabbitMQ reports it: 1 while the queue can hand a message
		// to a consumer at once (it has consumers and no message waits
		// for them), 0 otherwise; read now, not averaged.
		capacity := 0.0
		if q.Consumers > 0 && q.Ready == 0 {
			capacity = 1.0
		}
		it["consumer_capacity"], it["consumer_utilisation"] = capacity, capacity
	}
	if orDefault(q.Type, "classic") == "classic" {
		it["head_message_timestamp"] = nil
		if q.HasHeadTimestamp {
			it["head_message_timestamp"] = q.HeadTimestamp
		}
		if ms, idle := v.idleSince(); idle {
			it["idle_since"] = time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000+00:00")
		}
	}
	// As RabbitMQ: null unless the queue has single active consumer
	// and an active one.
	it["single_active_consumer_tag"] = orNil(q.ActiveConsumer)
	// RabbitMQ lists the same tag under its internal name too.
	it["single_active_consumer_ctag"] = it["single_active_consumer_tag"]
	if q.Type == "quorum" {
		it["messages_dlx"] = q.DeadLettered
		it["message_bytes_dlx"] = q.DeadLetteredBytes
	}
	if q.Dedup {
		// As the message-deduplication plugin reports a queue's cache.
		it["deduplication_cache_size"] = q.DedupCached
		it["deduplication_dropped"] = q.DedupDropped
	}
	if q.GroupHeader != "" {
		it["message_groups"] = q.Groups
	}
	it["message_stats"] = messageStats(v, vals, queueMsgFields)
	statsInto(it, v, vals, lengthFields, classLengths)
	if q.Owner != "" {
		it["owner_pid_details"] = map[string]any{"name": q.Owner}
	}
	if q.Stream != nil {
		streamQueueJSON(it, q)
	}
	return it
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// orNil is s, or nil (JSON null) when s is empty.
func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *Server) exchangeJSON(x broker.ExchangeInfo, rs ranges) item {
	var pol string
	if x.Name != "" { // policies do not apply to the default exchange
		pol, _, _ = s.b.PolicyMatch(x.VHost, x.Name, false)
	}
	it := item{
		"name":                      x.Name,
		"vhost":                     x.VHost,
		"type":                      x.Type,
		"durable":                   x.Durable,
		"auto_delete":               x.AutoDelete,
		"internal":                  x.Internal,
		"arguments":                 amqp.TableJSON(x.Arguments),
		"policy":                    orNil(pol),
		"user_who_performed_action": "rmq-internal",
		"message_stats":             messageStats(s.rates.view(exchangeKey(x), rs), exchangeValues(x), exchangeMsgFields),
	}
	if x.Type == "x-delayed-message" || x.Delayed > 0 || x.Arguments["x-delayed-exchange"] == true {
		// As the delayed-message exchange plugin reports it.
		it["messages_delayed"] = x.Delayed
	}
	if x.DedupCached >= 0 {
		it["deduplication_cache_size"] = x.DedupCached
	}
	return it
}

// propertiesKey is RabbitMQ's identifier of a binding within its source
// and destination: "~" for an empty key without arguments, the key alone
// without arguments, else the key, "~" and a digest of the arguments.
func propertiesKey(key string, args amqp.Table) string {
	if len(args) == 0 {
		if key == "" {
			return "~"
		}
		return key
	}
	enc, _ := args.AppendTo(nil)
	var h uint64 = 14695981039346656037
	for _, c := range enc {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return key + "~" + strconv.FormatUint(h, 36)
}

func bindingJSON(bn broker.BindingInfo) item {
	dt := "queue"
	if bn.DestinationIsExchange {
		dt = "exchange"
	}
	return item{
		"source":           bn.Source,
		"vhost":            bn.VHost,
		"destination":      bn.Destination,
		"destination_type": dt,
		"routing_key":      bn.RoutingKey,
		"arguments":        amqp.TableJSON(bn.Arguments),
		"properties_key":   propertiesKey(bn.RoutingKey, bn.Arguments),
	}
}

func (s *Server) connectionJSON(c broker.ConnectionInfo, rs ranges) item {
	state := "starting"
	if c.Open {
		state = "running"
	}
	it := item{
		"name":                      c.Name,
		"node":                      nodeName(),
		"type":                      "network",
		"protocol":                  "AMQP 0-9-1",
		"state":                     state,
		"vhost":                     c.VHost,
		"user":                      c.User,
		"user_provided_name":        nil,
		"channels":                  c.Channels,
		"peer_host":                 c.PeerHost,
		"peer_port":                 c.PeerPort,
		"host":                      c.Host,
		"port":                      c.Port,
		"ssl":                       false,
		"auth_mechanism":            "PLAIN",
		"connected_at":              c.ConnectedAt.UnixMilli(),
		"client_properties":         amqp.TableJSON(c.ClientProperties),
		"frame_max":                 c.FrameMax,
		"channel_max":               c.ChannelMax,
		"timeout":                   int(c.Heartbeat / time.Second),
		"send_pend":                 c.SendPending,
		"recv_cnt":                  c.RecvCnt,
		"send_cnt":                  c.SendCnt,
		"peer_cert_issuer":          nil,
		"peer_cert_subject":         nil,
		"peer_cert_validity":        nil,
		"ssl_cipher":                nil,
		"ssl_hash":                  nil,
		"ssl_key_exchange":          nil,
		"ssl_protocol":              nil,
		"user_who_performed_action": c.User,
	}
	statsInto(it, s.rates.view(connectionKey(c.Name), rs), connectionValues(c), octetFields, classData)
	if n, ok := c.ClientProperties["connection_name"].(string); ok {
		it["user_provided_name"] = n
	}
	return it
}

func channelName(c string, n uint16) string { return fmt.Sprintf("%s (%d)", c, n) }

func peerOf(conn string) (string, int) {
	peer, _, _ := strings.Cut(conn, " -> ")
	i := strings.LastIndex(peer, ":")
	if i < 0 {
		return peer, 0
	}
	port, _ := strconv.Atoi(peer[i+1:])
	return strings.Trim(peer[:i], "[]"), port
}

func (s *Server) channelJSON(c broker.ChannelInfo, rs ranges) item {
	host, port := peerOf(c.Connection)
	v := s.rates.view(channelKey(c), rs)
	it := item{
		"name":   channelName(c.Connection, c.Number),
		"number": c.Number,
		"node":   nodeName(),
		"connection_details": map[string]any{
			"name": c.Connection, "peer_host": host, "peer_port": port,
		},
		"vhost":                     c.VHost,
		"user":                      c.User,
		"state":                     "running",
		"consumer_count":            c.Consumers,
		"messages_unacknowledged":   c.Unacked,
		"prefetch_count":            c.Prefetch,
		"global_prefetch_count":     c.GlobalPrefetch,
		"confirm":                   c.Confirm,
		"transactional":             c.Transactional,
		"messages_unconfirmed":      c.Unconfirmed,
		"user_who_performed_action": c.User,
		"message_stats":             channelMessageStats(v, c.Stats),
	}
	// As RabbitMQ: when its counters have not moved since the sample
	// before the last (the queue's idle_since likewise).
	if ms, idle := v.idleSince(); idle {
		it["idle_since"] = time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000+00:00")
	}
	return it
}

func consumerJSON(c broker.ConsumerInfo, user string) item {
	host, port := peerOf(c.Connection)
	it := item{
		"consumer_tag": c.Tag,
		"queue":        map[string]any{"name": c.Queue, "vhost": c.VHost},
		"channel_details": map[string]any{
			"name": channelName(c.Connection, c.Channel), "number": c.Channel,
			"connection_name": c.Connection, "peer_host": host, "peer_port": port, "user": user, "node": nodeName(),
		},
		"ack_required":    c.AckRequired,
		"exclusive":       c.Exclusive,
		"prefetch_count":  c.Prefetch,
		"arguments":       map[string]any{},
		"active":          true,
		"activity_status": "up",
		"priority":        c.Priority,
	}
	if c.IsStream {
		streamConsumerJSON(it, c)
	}
	return it
}

// tagsFromJSON reads user tags given as a list or a comma-separated string.
func tagsFromJSON(v any) []string {
	var tags []string
	switch x := v.(type) {
	case string:
		for t := range strings.SplitSeq(x, ",") {
			if t = strings.TrimSpace(t); t != "" {
				tags = append(tags, t)
			}
		}
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok && s != "" {
				tags = append(tags, s)
			}
		}
	}
	return tags
}

// boolField reads a JSON boolean that may come as a string.
func boolField(m map[string]any, k string) bool {
	switch x := m[k].(type) {
	case bool:
		return x
	case string:
		return x == "true"
	}
	return false
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// persistentCounts is RabbitMQ's messages_persistent and
// message_bytes_persistent of q: a durable classic queue's messages
// published persistent (delivery mode 2), none for a transient queue;
// every message of a quorum queue or a stream, which keep them all on
// disk.
func persistentCounts(q *broker.QueueInfo) (int, int64) {
	if q.Type == "quorum" || q.Type == "stream" {
		return q.Ready + q.Unacked, q.ReadyBytes + q.UnackedBytes
	}
	return q.Persistent, q.PersistentBytes
}
