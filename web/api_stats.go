package web

import (
	"net/http"
	"time"

	"github.com/warrenmq/warren/broker"
)

// Statistics in API objects: message_stats with their "_details" rates
// and samples, queue lengths, connection octets. The values shown are
// read from the broker when the request runs; rates and samples come
// from the sampler (rates.go).

// statField names a sampled value in JSON.
type statField struct {
	name string
	f    field
}

var (
	// queueMsgFields are a queue's message_stats.
	queueMsgFields = []statField{
		{"publish", fPublish}, {"deliver", fDeliver}, {"deliver_no_ack", fDeliverNoAck},
		{"get", fGet}, {"get_no_ack", fGetNoAck}, {"get_empty", fGetEmpty},
		{"deliver_get", fDeliverGet}, {"ack", fAck}, {"redeliver", fRedeliver},
	}
	// channelMsgFields are the message_stats of a channel, a vhost and
	// the overview.
	channelMsgFields = []statField{
		{"publish", fPublish}, {"confirm", fConfirm},
		{"return_unroutable", fReturnUnroutable}, {"drop_unroutable", fDropUnroutable},
		{"deliver", fDeliver}, {"deliver_no_ack", fDeliverNoAck},
		{"get", fGet}, {"get_no_ack", fGetNoAck}, {"get_empty", fGetEmpty},
		{"deliver_get", fDeliverGet}, {"redeliver", fRedeliver}, {"ack", fAck},
	}
	exchangeMsgFields = []statField{{"publish_in", fPublishIn}, {"publish_out", fPublishOut}}
	lengthFields      = []statField{
		{"messages", fMessages}, {"messages_ready", fReady}, {"messages_unacknowledged", fUnacked},
	}
	octetFields = []statField{{"recv_oct", fRecvOct}, {"send_oct", fSendOct}}
)

// requestRanges reads a request's *_age and *_incr parameters,
// answering 400 when they are malformed.
func requestRanges(w http.ResponseWriter, r *http.Request) (ranges, bool) {
	rs, bad := parseRanges(r.URL.Query())
	if bad != "" {
		badRequest(w, bad)
		return rs, false
	}
	return rs, true
}

// statsInto adds the fields fs of vals to it, each with its details.
func statsInto(it item, v view, vals *values, fs []statField, c rangeClass) item {
	for _, sf := range fs {
		it[sf.name] = jsonNumber(vals[sf.f])
		it[sf.name+"_details"] = v.details(sf.f, c)
	}
	return it
}

// channelMessageStats is a channel's message_stats object.
func channelMessageStats(v view, st broker.ChannelStats) item {
	vals := channelValues(st)
	return messageStats(v, &vals, channelMsgFields)
}

// messageStats is a message_stats object.
func messageStats(v view, vals *values, fs []statField) item {
	return statsInto(make(item, 2*len(fs)), v, vals, fs, classMsg)
}

func queueValues(q broker.QueueInfo) *values {
	var v values
	queueStatsValues(&v, q.Stats)
	v[fMessages], v[fReady], v[fUnacked] = float64(q.Ready+q.Unacked), float64(q.Ready), float64(q.Unacked)
	return &v
}

// queueStatsValues adds a queue's counters to v. RabbitMQ's deliver and
// get count manual acknowledgement mode only; deliver_get counts all.
func queueStatsValues(v *values, s broker.MessageStats) {
	v[fPublish] += float64(s.Publish)
	v[fDeliver] += float64(s.Deliver - s.DeliverNoAck)
	v[fDeliverNoAck] += float64(s.DeliverNoAck)
	v[fGet] += float64(s.Get - s.GetNoAck)
	v[fGetNoAck] += float64(s.GetNoAck)
	v[fGetEmpty] += float64(s.GetEmpty)
	v[fDeliverGet] += float64(s.Deliver + s.Get)
	v[fAck] += float64(s.Ack)
	v[fRedeliver] += float64(s.Redeliver)
}

func channelValues(s broker.ChannelStats) values {
	var v values
	channelStatsValues(&v, s)
	v[fDeliverNoAck], v[fGetNoAck], v[fGetEmpty] = float64(s.DeliverNoAck), float64(s.GetNoAck), float64(s.GetEmpty)
	v[fPublish], v[fDeliver], v[fGet], v[fAck], v[fRedeliver] = float64(s.Publish), float64(s.Deliver), float64(s.Get), float64(s.Ack), float64(s.Redeliver)
	v[fDeliverGet] = float64(s.Deliver + s.DeliverNoAck + s.Get + s.GetNoAck)
	return v
}

// channelStatsValues sets the counters only channels keep.
func channelStatsValues(v *values, s broker.ChannelStats) {
	v[fConfirm] = float64(s.Confirm)
	v[fReturnUnroutable] = float64(s.ReturnUnroutable)
	v[fDropUnroutable] = float64(s.DropUnroutable)
}

// overviewValues are the broker-wide values. Enqueues, deliveries, gets
// and acks are the queues' (deleted ones included, so they never
// decrease); confirms and unroutable messages the channels'.
func overviewValues(o broker.Overview, ct broker.ChannelStats, ch broker.Churn) *values {
	var v values
	queueStatsValues(&v, o.Totals)
	channelStatsValues(&v, ct)
	for f, n := range churnCounts(ch) {
		v[f] = float64(n)
	}
	v[fMessages], v[fReady], v[fUnacked] = float64(o.Ready+o.Unacked), float64(o.Ready), float64(o.Unacked)
	return &v
}

// vhostValues are computed as the overview's, for one vhost.
func vhostValues(qs []broker.QueueInfo, vs broker.VHostStats) *values {
	var v values
	for _, q := range qs {
		queueStatsValues(&v, q.Stats)
		v[fMessages] += float64(q.Ready + q.Unacked)
		v[fReady] += float64(q.Ready)
		v[fUnacked] += float64(q.Unacked)
	}
	channelStatsValues(&v, vs.Channels)
	v[fRecvOct], v[fSendOct] = float64(vs.RecvOct), float64(vs.SendOct)
	return &v
}

func connectionValues(c broker.ConnectionInfo) *values {
	v := octetValues(c.RecvOct, c.SendOct)
	return &v
}

func octetValues(recv, send uint64) values {
	var v values
	v[fRecvOct], v[fSendOct] = float64(recv), float64(send)
	return v
}

func exchangeValues(x broker.ExchangeInfo) *values {
	var v values
	v[fPublishIn], v[fPublishOut] = float64(x.PublishIn), float64(x.PublishOut)
	return &v
}

// channel keys are the channel's connection name and number;
// connections' their name; exchanges' and queues' their vhost and name.
func queueKey(q broker.QueueInfo) seriesKey {
	return seriesKey{kind: kindQueue, vhost: q.VHost, name: q.Name}
}
func exchangeKey(x broker.ExchangeInfo) seriesKey {
	return seriesKey{kind: kindExchange, vhost: x.VHost, name: x.Name}
}
func connectionKey(name string) seriesKey { return seriesKey{kind: kindConnection, name: name} }
func channelKey(c broker.ChannelInfo) seriesKey {
	return seriesKey{kind: kindChannel, name: c.Connection, num: c.Number}
}
func vhostKey(name string) seriesKey { return seriesKey{kind: kindVHost, name: name} }

var overallKey = seriesKey{kind: kindOverall}

// sample reads every object's values and records them (sampleLoop). The
// broker is read before the tick takes the rates' lock; connections and
// channels through the sampler's own listings, without the copies of the
// API's.
func (s *Server) sample(now time.Time) {
	overall := overviewValues(s.b.Overview(), s.b.ChannelTotals(), s.b.Churn())
	node := nodeValues(s.readNodeStats())
	qs, _ := s.b.Queues("")
	byVHost := make(map[string][]broker.QueueInfo)
	for _, q := range qs {
		byVHost[q.VHost] = append(byVHost[q.VHost], q)
	}
	vstats := s.b.VHostStats()
	vhosts := s.b.VHosts()
	xs, _ := s.b.Exchanges("")
	conns := s.b.ConnectionsOctets()
	chans := s.b.ChannelsCounters()

	sp := s.rates.begin(now)
	defer sp.end()
	sp.put(overallKey, overall)
	sp.put(nodeKey, node)
	for _, q := range qs {
		sp.put(queueKey(q), queueValues(q))
	}
	for _, v := range vhosts {
		sp.put(vhostKey(v.Name), vhostValues(byVHost[v.Name], vstats[v.Name]))
	}
	for _, x := range xs {
		sp.put(exchangeKey(x), exchangeValues(x))
	}
	for _, c := range conns {
		v := octetValues(c.RecvOct, c.SendOct)
		sp.put(connectionKey(c.Name), &v)
	}
	for _, c := range chans {
		v := channelValues(c.Stats)
		sp.put(seriesKey{kind: kindChannel, name: c.Connection, num: c.Number}, &v)
	}
}

var churnFields = []statField{
	{"connection_created", fConnectionCreated}, {"connection_closed", fConnectionClosed},
	{"channel_created", fChannelCreated}, {"channel_closed", fChannelClosed},
	{"queue_declared", fQueueDeclared}, {"queue_created", fQueueCreated},
	{"queue_deleted", fQueueDeleted},
}

func churnCounts(c broker.Churn) map[field]uint64 {
	return map[field]uint64{
		fConnectionCreated: c.ConnectionsOpened, fConnectionClosed: c.ConnectionsClosed,
		fChannelCreated: c.ChannelsOpened, fChannelClosed: c.ChannelsClosed,
		fQueueDeclared: c.QueuesDeclared, fQueueCreated: c.QueuesCreated, fQueueDeleted: c.QueuesDeleted,
	}
}

// churnInto adds RabbitMQ's churn counters (connection_created, ...) with
// their rates to it: the overview's churn_rates, and the node's.
func churnInto(it item, c broker.Churn, v view) item {
	var vals values
	for f, n := range churnCounts(c) {
		vals[f] = float64(n)
	}
	return statsInto(it, v, &vals, churnFields, classMsg)
}
