package web

import (
	"net/http"
	"runtime"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenmq/warren/broker"
)

// Prometheus metrics, named, typed and labelled as RabbitMQ's
// rabbitmq_prometheus plugin, on three endpoints as RabbitMQ's:
//
//   - /metrics: node-wide families, channel and connection families
//     summed over all channels and connections (closed ones included in
//     the counters). The queue families are per queue there, labelled
//     vhost and queue (as RabbitMQ's with
//     prometheus.return_per_object_metrics), which Warren has always
//     served.
//   - /metrics/per-object: every family per object: queues (vhost,
//     queue), channels (channel, vhost, and exchange for publishes),
//     connections (channel: the connection's name, as RabbitMQ labels a
//     connection by its process).
//   - /metrics/detailed?family=...&vhost=...: RabbitMQ's
//     rabbitmq_detailed_* families of the groups asked for, restricted to
//     the vhosts asked for (all when none is given).
//
// A collector reads broker snapshots at scrape time: nothing is kept
// between scrapes. Quorum queues run on one node: their Raft log is the
// queue's own command log, one entry per enqueue and per settlement,
// all committed once written; the entries still needed (the queue's
// messages) are those after the snapshot index; the term is 1, there
// being no election.

type metricsMode uint8

const (
	modeAggregated metricsMode = iota
	modePerObject
	modeDetailed
)

// detailedFamilies are the groups /metrics/detailed serves.
var detailedFamilies = []string{
	"queue_coarse_metrics", "queue_consumer_count", "queue_metrics",
	"channel_metrics", "channel_exchange_metrics", "channel_queue_metrics",
	"connection_coarse_metrics", "connection_metrics", "exchange_names", "vhost_status",
}

// collector is the broker's prometheus.Collector for one endpoint. It
// describes nothing up front (an unchecked collector): its families
// depend on the broker's objects.
type collector struct {
	s        *Server
	mode     metricsMode
	families []string        // detailed: the groups asked for
	vhosts   map[string]bool // detailed: the vhosts asked for (nil = all)
}

func (c collector) Describe(chan<- *prometheus.Desc) {}

// emitter writes samples of one scrape, making each family's Desc once.
type emitter struct {
	ch    chan<- prometheus.Metric
	descs map[string]*prometheus.Desc
}

func (e *emitter) emit(t prometheus.ValueType, name, help string, v float64, labels ...string) {
	key := name + "\x00" + strings.Join(labelNames(labels), ",")
	d := e.descs[key]
	if d == nil {
		d = prometheus.NewDesc(name, help, labelNames(labels), nil)
		e.descs[key] = d
	}
	e.ch <- prometheus.MustNewConstMetric(d, t, v, labelValues(labels)...)
}

// labels are given as name, value pairs.
func labelNames(kv []string) []string {
	out := make([]string, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		out = append(out, kv[i])
	}
	return out
}

func labelValues(kv []string) []string {
	out := make([]string, 0, len(kv)/2)
	for i := 1; i < len(kv); i += 2 {
		out = append(out, kv[i])
	}
	return out
}

func (e *emitter) gauge(name, help string, v float64, labels ...string) {
	e.emit(prometheus.GaugeValue, name, help, v, labels...)
}

func (e *emitter) counter(name, help string, v uint64, labels ...string) {
	e.emit(prometheus.CounterValue, name, help, float64(v), labels...)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	e := &emitter{ch: ch, descs: make(map[string]*prometheus.Desc)}
	s := c.s
	e.emit(prometheus.UntypedValue, "rabbitmq_build_info", "RabbitMQ & Erlang/OTP version info", 1,
		"rabbitmq_version", broker.RabbitMQVersion, "prometheus_plugin_version", broker.RabbitMQVersion,
		"prometheus_client_version", "client_golang", "erlang_version", runtime.Version(), "product", "Warren")
	e.emit(prometheus.UntypedValue, "rabbitmq_identity_info", "RabbitMQ node & cluster identity info", 1,
		"rabbitmq_node", nodeName(), "rabbitmq_cluster", s.clusterName(), "rabbitmq_cluster_permanent_id", "warren-"+nodeName())
	if c.mode == modeDetailed {
		c.collectDetailed(e)
		return
	}
	perObject := c.mode == modePerObject
	o := s.b.Overview()
	e.gauge("rabbitmq_connections", "Connections currently open", float64(o.Connections))
	e.gauge("rabbitmq_channels", "Channels currently open", float64(o.Channels))
	e.gauge("rabbitmq_queues", "Queues available", float64(o.Queues))
	e.gauge("rabbitmq_consumers", "Consumers currently connected", float64(o.Consumers))
	e.gauge("rabbitmq_exchanges", "Exchanges available", float64(o.Exchanges))
	e.gauge("rabbitmq_vhosts", "Virtual hosts", float64(o.VHosts))
	e.counter("rabbitmq_global_messages_received_total", "Total number of messages received from publishers (counted per queue they were enqueued in)", o.Totals.Publish)
	e.counter("rabbitmq_global_messages_delivered_total", "Total number of messages delivered to consumers and basic.get", o.Totals.Deliver+o.Totals.Get)
	e.counter("rabbitmq_global_messages_delivered_consume_total", "Total number of messages delivered to consumers", o.Totals.Deliver)
	e.counter("rabbitmq_global_messages_delivered_get_total", "Total number of messages fetched with basic.get", o.Totals.Get)
	e.counter("rabbitmq_global_messages_redelivered_total", "Total number of messages redelivered to consumers", o.Totals.Redeliver)
	e.counter("rabbitmq_global_messages_acknowledged_total", "Total number of messages acknowledged by consumers", o.Totals.Ack)

	churn := s.b.Churn()
	e.counter("rabbitmq_connections_opened_total", "Total number of connections opened", churn.ConnectionsOpened)
	e.counter("rabbitmq_connections_closed_total", "Total number of connections closed or terminated", churn.ConnectionsClosed)
	e.counter("rabbitmq_channels_opened_total", "Total number of channels opened", churn.ChannelsOpened)
	e.counter("rabbitmq_channels_closed_total", "Total number of channels closed", churn.ChannelsClosed)
	e.counter("rabbitmq_queues_declared_total", "Total number of queues declared", churn.QueuesDeclared)
	e.counter("rabbitmq_queues_created_total", "Total number of queues created", churn.QueuesCreated)
	e.counter("rabbitmq_queues_deleted_total", "Total number of queues deleted", churn.QueuesDeleted)

	ns := s.readNodeStats()
	e.gauge("rabbitmq_resident_memory_limit_bytes", "Memory high watermark in bytes", float64(ns.res.MemLimit))
	e.gauge("rabbitmq_process_resident_memory_bytes", "Memory used in bytes", float64(ns.res.MemUsed))
	e.gauge("rabbitmq_disk_space_available_bytes", "Disk space available in bytes", float64(ns.res.DiskFree))
	e.gauge("rabbitmq_disk_space_available_limit_bytes", "Free disk space low watermark in bytes", float64(ns.res.DiskFreeLimit))
	e.gauge("rabbitmq_process_max_fds", "Open file descriptors limit", float64(ns.fdTotal))
	e.gauge("rabbitmq_process_open_fds", "Open file descriptors", float64(ns.fdUsed))
	e.gauge("rabbitmq_process_max_tcp_sockets", "Open TCP sockets limit", float64(ns.fdTotal))
	e.gauge("rabbitmq_process_open_tcp_sockets", "Open TCP sockets", float64(ns.sockets))
	alarms := s.b.Alarms()
	e.gauge("rabbitmq_alarms_memory_used_watermark", "is 1 if VM memory watermark alarm is in effect", boolValue(slices.Contains(alarms, broker.AlarmMemory)))
	e.gauge("rabbitmq_alarms_free_disk_space_watermark", "is 1 if free disk space watermark alarm is in effect", boolValue(slices.Contains(alarms, broker.AlarmDisk)))

	collectDelayed(e, s.b)

	qs, _ := s.b.Queues("")
	c.collectQueues(e, qs)
	c.collectRaft(e, qs, perObject)
	c.collectChannels(e, s.b.Channels(), perObject, "rabbitmq_channel_", nil)
	c.collectConnections(e, s.b.Connections(), perObject, "rabbitmq_connection_")
}

// collectDelayed emits how late the delayed-message scheduler routed
// messages after their due time, as a histogram in seconds.
func collectDelayed(e *emitter, b *broker.Broker) {
	bounds, counts, sumMs := b.DelayedLateness()
	buckets := make(map[float64]uint64, len(bounds))
	var total uint64
	for i, bound := range bounds {
		total += uint64(counts[i])
		buckets[float64(bound)/1000] = total
	}
	total += uint64(counts[len(counts)-1])
	const name = "warren_delayed_messages_lateness_seconds"
	d := prometheus.NewDesc(name, "How late delayed messages were routed after their due time", nil, nil)
	e.ch <- prometheus.MustNewConstHistogram(d, total, float64(sumMs)/1000, buckets)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectQueues writes the queue families, per queue.
func (c collector) collectQueues(e *emitter, qs []broker.QueueInfo) {
	for _, q := range qs {
		l := []string{"vhost", q.VHost, "queue", q.Name}
		e.gauge("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages - total queue depth", float64(q.Ready+q.Unacked), l...)
		e.gauge("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers", float64(q.Ready), l...)
		e.gauge("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged", float64(q.Unacked), l...)
		e.gauge("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages", float64(q.ReadyBytes), l...)
		e.gauge("rabbitmq_queue_messages_paged_out", "Messages paged out to disk", float64(q.PagedOut), l...)
		e.gauge("rabbitmq_queue_messages_paged_out_bytes", "Size in bytes of messages paged out to disk", float64(q.PagedOutBytes), l...)
		e.gauge("rabbitmq_queue_consumers", "Consumers on a queue", float64(q.Consumers), l...)
		e.counter("rabbitmq_queue_messages_published_total", "Total number of messages published to queues", q.Stats.Publish, l...)
	}
}

// collectRaft writes the Raft families of the quorum queues: per queue,
// or summed.
func (c collector) collectRaft(e *emitter, qs []broker.QueueInfo, perQueue bool) {
	var commit, snapshot, terms float64
	n := 0
	// Every quorum queue's entries go through the node's one group
	// commit: its latency is theirs.
	latency := c.s.b.CommitLatency().Seconds()
	for _, q := range qs {
		if q.Type != "quorum" {
			continue
		}
		n++
		idx := float64(q.Stats.Publish + q.Stats.Ack)
		snap := max(0, idx-float64(q.Ready+q.Unacked))
		if perQueue {
			l := []string{"vhost", q.VHost, "queue", q.Name}
			e.gauge("rabbitmq_raft_log_commit_index", "Raft log commit index", idx, l...)
			e.gauge("rabbitmq_raft_log_last_written_index", "Raft log last written index", idx, l...)
			e.gauge("rabbitmq_raft_log_last_applied_index", "Raft log last applied index", idx, l...)
			e.gauge("rabbitmq_raft_log_snapshot_index", "Raft log snapshot index", snap, l...)
			e.counter("rabbitmq_raft_term_total", "Current Raft term number", 1, l...)
			e.gauge("rabbitmq_raft_entry_commit_latency_seconds", "Time taken for a log entry to be committed", latency, l...)
			continue
		}
		commit += idx
		snapshot += snap
		terms++
	}
	if perQueue || n == 0 {
		return
	}
	e.gauge("rabbitmq_raft_log_commit_index", "Raft log commit index", commit)
	e.gauge("rabbitmq_raft_log_last_written_index", "Raft log last written index", commit)
	e.gauge("rabbitmq_raft_log_last_applied_index", "Raft log last applied index", commit)
	e.gauge("rabbitmq_raft_log_snapshot_index", "Raft log snapshot index", snapshot)
	e.emit(prometheus.CounterValue, "rabbitmq_raft_term_total", "Current Raft term number", terms)
	e.gauge("rabbitmq_raft_entry_commit_latency_seconds", "Time taken for a log entry to be committed", latency)
}

// collectChannels writes the channel families, named prefix+...: per
// channel, or summed (closed channels included in the counters).
func (c collector) collectChannels(e *emitter, chans []broker.ChannelInfo, perChannel bool, prefix string, groups map[string]bool) {
	want := func(g string) bool { return groups == nil || groups[g] }
	if !perChannel {
		var consumers, unacked, unconfirmed, prefetch float64
		for _, ci := range chans {
			consumers += float64(ci.Consumers)
			unacked += float64(ci.Unacked)
			unconfirmed += float64(ci.Unconfirmed)
			prefetch += float64(ci.GlobalPrefetch)
		}
		e.gauge(prefix+"consumers", "Consumers on a channel", consumers)
		e.gauge(prefix+"messages_unacked", "Delivered but not yet acknowledged messages", unacked)
		e.gauge(prefix+"messages_unconfirmed", "Published but not yet confirmed messages", unconfirmed)
		e.gauge(prefix+"prefetch", "Total limit of unacknowledged messages for all consumers on a channel", prefetch)
		channelCounters(e, prefix, c.s.b.ChannelTotals())
		return
	}
	for _, ci := range chans {
		name := channelName(ci.Connection, ci.Number)
		l := []string{"channel", name}
		if want("channel_metrics") {
			e.gauge(prefix+"consumers", "Consumers on a channel", float64(ci.Consumers), l...)
			e.gauge(prefix+"messages_unacked", "Delivered but not yet acknowledged messages", float64(ci.Unacked), l...)
			e.gauge(prefix+"messages_unconfirmed", "Published but not yet confirmed messages", float64(ci.Unconfirmed), l...)
			e.gauge(prefix+"prefetch", "Total limit of unacknowledged messages for all consumers on a channel", float64(ci.GlobalPrefetch), l...)
			e.gauge(prefix[:len(prefix)-len("channel_")]+"consumer_prefetch", "Limit of unacknowledged messages for each consumer", float64(ci.Prefetch), l...)
		}
		lv := []string{"channel", name, "vhost", ci.VHost}
		if want("channel_exchange_metrics") {
			for ex, n := range ci.Published {
				e.counter(prefix+"messages_published_total", "Total number of messages published into an exchange on a channel", n[0], "channel", name, "vhost", ci.VHost, "exchange", ex)
			}
			e.counter(prefix+"messages_confirmed_total", "Total number of messages published into an exchange and confirmed on the channel", ci.Stats.Confirm, lv...)
			e.counter(prefix+"messages_unroutable_returned_total", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable", ci.Stats.ReturnUnroutable, lv...)
			e.counter(prefix+"messages_unroutable_dropped_total", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable", ci.Stats.DropUnroutable, lv...)
		}
		if want("channel_queue_metrics") {
			deliveryCounters(e, prefix, ci.Stats, lv...)
		}
	}
}

// channelCounters writes the channel counters summed.
func channelCounters(e *emitter, prefix string, st broker.ChannelStats) {
	e.counter(prefix+"messages_published_total", "Total number of messages published into an exchange on a channel", st.Publish)
	e.counter(prefix+"messages_confirmed_total", "Total number of messages published into an exchange and confirmed on the channel", st.Confirm)
	e.counter(prefix+"messages_unroutable_returned_total", "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable", st.ReturnUnroutable)
	e.counter(prefix+"messages_unroutable_dropped_total", "Total number of messages published as non-mandatory into an exchange and dropped as unroutable", st.DropUnroutable)
	deliveryCounters(e, prefix, st)
}

// deliveryCounters are RabbitMQ's channel_queue_metrics: its "delivered"
// and "get" are the automatic-acknowledgement ones, "_ack" the manual.
func deliveryCounters(e *emitter, prefix string, st broker.ChannelStats, l ...string) {
	e.counter(prefix+"get_ack_total", "Total number of messages fetched with basic.get in manual acknowledgement mode", st.Get, l...)
	e.counter(prefix+"get_total", "Total number of messages fetched with basic.get in automatic acknowledgement mode", st.GetNoAck, l...)
	e.counter(prefix+"messages_delivered_ack_total", "Total number of messages delivered to consumers in manual acknowledgement mode", st.Deliver, l...)
	e.counter(prefix+"messages_delivered_total", "Total number of messages delivered to consumers in automatic acknowledgement mode", st.DeliverNoAck, l...)
	e.counter(prefix+"messages_redelivered_total", "Total number of messages redelivered to consumers", st.Redeliver, l...)
	e.counter(prefix+"messages_acked_total", "Total number of messages acknowledged by consumers", st.Ack, l...)
	e.counter(prefix+"get_empty_total", "Total number of times basic.get operations fetched no message", st.GetEmpty, l...)
}

// collectConnections writes the connection families: per connection
// (labelled channel, as RabbitMQ labels a connection's process), or
// summed over the open connections.
func (c collector) collectConnections(e *emitter, conns []broker.ConnectionInfo, perConn bool, prefix string) {
	if !perConn {
		var in, out, inP, outP uint64
		for _, ci := range conns {
			in, out, inP, outP = in+ci.RecvOct, out+ci.SendOct, inP+ci.RecvCnt, outP+ci.SendCnt
		}
		e.counter(prefix+"incoming_bytes_total", "Total number of bytes received on a connection", in)
		e.counter(prefix+"outgoing_bytes_total", "Total number of bytes sent on a connection", out)
		e.counter(prefix+"incoming_packets_total", "Total number of packets received on a connection", inP)
		e.counter(prefix+"outgoing_packets_total", "Total number of packets sent on a connection", outP)
		return
	}
	for _, ci := range conns {
		l := []string{"channel", ci.Name}
		e.counter(prefix+"incoming_bytes_total", "Total number of bytes received on a connection", ci.RecvOct, l...)
		e.counter(prefix+"outgoing_bytes_total", "Total number of bytes sent on a connection", ci.SendOct, l...)
		e.counter(prefix+"incoming_packets_total", "Total number of packets received on a connection", ci.RecvCnt, l...)
		e.counter(prefix+"outgoing_packets_total", "Total number of packets sent on a connection", ci.SendCnt, l...)
	}
}

// collectDetailed writes the rabbitmq_detailed_* families asked for.
func (c collector) collectDetailed(e *emitter) {
	s := c.s
	want := make(map[string]bool)
	for _, f := range c.families {
		want[f] = true
	}
	inVHost := func(v string) bool { return c.vhosts == nil || c.vhosts[v] }
	const p = "rabbitmq_detailed_"
	if want["queue_coarse_metrics"] || want["queue_consumer_count"] || want["queue_metrics"] {
		qs, _ := s.b.Queues("")
		for _, q := range qs {
			if !inVHost(q.VHost) {
				continue
			}
			l := []string{"vhost", q.VHost, "queue", q.Name}
			if want["queue_coarse_metrics"] {
				e.gauge(p+"queue_messages_ready", "Messages ready to be delivered to consumers", float64(q.Ready), l...)
				e.gauge(p+"queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged", float64(q.Unacked), l...)
				e.gauge(p+"queue_messages", "Sum of ready and unacknowledged messages - total queue depth", float64(q.Ready+q.Unacked), l...)
			}
			if want["queue_consumer_count"] || want["queue_metrics"] {
				e.gauge(p+"queue_consumers", "Consumers on a queue", float64(q.Consumers), l...)
			}
			if want["queue_metrics"] {
				e.gauge(p+"queue_messages_ready_bytes", "Size in bytes of ready messages", float64(q.ReadyBytes), l...)
				e.gauge(p+"queue_messages_ram", "Ready and unacknowledged messages stored in memory", float64(q.Ready-q.PagedOut+q.Unacked), l...)
				e.gauge(p+"queue_messages_ready_ram", "Ready messages stored in memory", float64(q.Ready-q.PagedOut), l...)
				e.gauge(p+"queue_messages_unacked_ram", "Unacknowledged messages stored in memory", float64(q.Unacked), l...)
				n, bytes := persistentCounts(&q)
				e.gauge(p+"queue_messages_persistent", "Persistent messages", float64(n), l...)
				e.gauge(p+"queue_messages_persistent_bytes", "Size in bytes of persistent messages", float64(bytes), l...)
				e.gauge(p+"queue_messages_paged_out", "Messages paged out to disk", float64(q.PagedOut), l...)
				e.gauge(p+"queue_messages_paged_out_bytes", "Size in bytes of messages paged out to disk", float64(q.PagedOutBytes), l...)
			}
		}
	}
	if want["channel_metrics"] || want["channel_exchange_metrics"] || want["channel_queue_metrics"] {
		var chans []broker.ChannelInfo
		for _, ci := range s.b.Channels() {
			if inVHost(ci.VHost) {
				chans = append(chans, ci)
			}
		}
		c.collectChannels(e, chans, true, p+"channel_", want)
	}
	if want["connection_coarse_metrics"] || want["connection_metrics"] {
		for _, ci := range s.b.Connections() {
			if !inVHost(ci.VHost) {
				continue
			}
			l := []string{"channel", ci.Name}
			if want["connection_coarse_metrics"] {
				e.counter(p+"connection_incoming_bytes_total", "Total number of bytes received on a connection", ci.RecvOct, l...)
				e.counter(p+"connection_outgoing_bytes_total", "Total number of bytes sent on a connection", ci.SendOct, l...)
			}
			if want["connection_metrics"] {
				e.counter(p+"connection_incoming_packets_total", "Total number of packets received on a connection", ci.RecvCnt, l...)
				e.counter(p+"connection_outgoing_packets_total", "Total number of packets sent on a connection", ci.SendCnt, l...)
			}
		}
	}
	if want["exchange_names"] {
		xs, _ := s.b.Exchanges("")
		for _, x := range xs {
			if inVHost(x.VHost) {
				e.gauge("rabbitmq_cluster_exchange_name", "Enumerates exchanges without any additional info. This value is cluster-wide.", 1,
					"vhost", x.VHost, "exchange", x.Name, "type", x.Type)
			}
		}
	}
	if want["vhost_status"] {
		for _, v := range s.b.VHosts() {
			if inVHost(v.Name) {
				e.gauge("rabbitmq_cluster_vhost_status", "Whether a given vhost is running", 1, "vhost", v.Name)
			}
		}
	}
}

// metricsHandler serves /metrics (and /metrics/, as RabbitMQ does),
// /metrics/per-object and /metrics/detailed.
func (s *Server) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{s: s, mode: modeAggregated}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	preg := prometheus.NewRegistry()
	preg.MustRegister(collector{s: s, mode: modePerObject})
	ph := promhttp.HandlerFor(preg, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	mux.Handle("GET /metrics/{$}", h)
	mux.Handle("GET /metrics/per-object", ph)
	mux.Handle("GET /metrics/per-object/{$}", ph)
	detailed := http.HandlerFunc(s.detailedMetrics)
	mux.Handle("GET /metrics/detailed", detailed)
	mux.Handle("GET /metrics/detailed/{$}", detailed)
	return mux
}

// detailedMetrics serves /metrics/detailed: the family groups named by
// the family parameters, of the vhosts named by the vhost parameters.
func (s *Server) detailedMetrics(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c := collector{s: s, mode: modeDetailed}
	for _, f := range q["family"] {
		if !slices.Contains(detailedFamilies, f) {
			http.Error(w, "unknown metric family "+f+"; known: "+strings.Join(detailedFamilies, ", "), http.StatusBadRequest)
			return
		}
		c.families = append(c.families, f)
	}
	if vs := q["vhost"]; len(vs) > 0 {
		c.vhosts = make(map[string]bool)
		for _, v := range vs {
			c.vhosts[v] = true
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
