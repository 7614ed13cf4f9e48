package web

import (
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/exchange"
)

// Node-level endpoints: overview, cluster name, nodes, whoami,
// connections, channels, consumers.

var startTime = time.Now()

func (s *Server) listeners() []item {
	var out []item
	if a := s.b.Addr(); a != nil {
		host, port := splitHostPort(a)
		out = append(out, item{"node": nodeName(), "protocol": "amqp", "ip_address": host, "port": port})
	}
	if a := s.Addr(); a != nil {
		host, port := splitHostPort(a)
		out = append(out, item{"node": nodeName(), "protocol": "http", "ip_address": host, "port": port})
	}
	if a := s.b.AMQPSAddr(); a != nil {
		host, port := splitHostPort(a)
		out = append(out, item{"node": nodeName(), "protocol": "amqp/ssl", "ip_address": host, "port": port})
	}
	if a := s.HTTPSAddr(); a != nil {
		host, port := splitHostPort(a)
		out = append(out, item{"node": nodeName(), "protocol": "https", "ip_address": host, "port": port})
	}
	if a := s.MetricsAddr(); a != nil {
		host, port := splitHostPort(a)
		out = append(out, item{"node": nodeName(), "protocol": "http/prometheus", "ip_address": host, "port": port})
	}
	return out
}

func splitHostPort(a net.Addr) (string, int) {
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String(), 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func (s *Server) getOverview(w http.ResponseWriter, r *http.Request, p *principal) {
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	o := s.b.Overview()
	vals := overviewValues(o, s.b.ChannelTotals(), s.b.Churn())
	v := s.rates.view(overallKey, rs)
	writeJSON(w, http.StatusOK, item{
		"management_version":  broker.RabbitMQVersion,
		"rabbitmq_version":    broker.RabbitMQVersion,
		"product_name":        "Warren",
		"product_version":     broker.Version,
		"cluster_name":        s.clusterName(),
		"node":                s.selfName(),
		"erlang_version":      runtime.Version(),
		"erlang_full_version": runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		"rates_mode":          "basic",
		"disable_stats":       false,
		"enable_queue_totals": true,
		"sample_retention_policies": item{
			"global":   []int{int(fineSpan / time.Second), int(coarseSpan / time.Second)},
			"basic":    []int{int(fineSpan / time.Second)},
			"detailed": []int{int(fineSpan / time.Second)},
		},
		"exchange_types": exchangeTypes(),
		"message_stats":  messageStats(v, vals, channelMsgFields),
		"churn_rates":    churnInto(item{}, s.b.Churn(), v),
		"queue_totals":   statsInto(item{}, v, vals, lengthFields, classLengths),
		"object_totals": item{
			"connections": o.Connections,
			"channels":    o.Channels,
			"exchanges":   o.Exchanges,
			"queues":      o.Queues,
			"consumers":   o.Consumers,
		},
		"listeners": s.listeners(),
		"contexts":  s.contexts(),
	})
}

// contexts are the HTTP listeners, as RabbitMQ's management contexts.
func (s *Server) contexts() []item {
	out := []item{}
	if a := s.Addr(); a != nil {
		_, port := splitHostPort(a)
		out = append(out, item{"node": nodeName(), "description": "Warren Management", "path": "/", "port": strconv.Itoa(port)})
	}
	if a := s.HTTPSAddr(); a != nil {
		_, port := splitHostPort(a)
		out = append(out, item{"node": nodeName(), "description": "Warren Management (HTTPS)", "path": "/", "port": strconv.Itoa(port), "ssl": true})
	}
	return out
}

// exchangeTypes are the exchange types the broker implements.
func exchangeTypes() []item {
	descs := map[string]string{
		"direct":  "AMQP direct exchange, as per the AMQP specification",
		"fanout":  "AMQP fanout exchange, as per the AMQP specification",
		"headers": "AMQP headers exchange, as per the AMQP specification",
		"topic":   "AMQP topic exchange, as per the AMQP specification",

		"x-consistent-hash": "Consistent Hashing Exchange",
		"x-modulus-hash":    "Modulus Hashing Exchange",
		"x-delayed-message": "Delayed Message Exchange",
	}
	var out []item
	for _, name := range []string{"direct", "fanout", "headers", "topic", "x-consistent-hash", "x-modulus-hash"} {
		if _, ok := exchange.ParseType(name); ok {
			out = append(out, item{"name": name, "description": descs[name], "enabled": true})
		}
	}
	out = append(out, item{"name": "x-delayed-message", "description": descs["x-delayed-message"], "enabled": true})
	return out
}

// clusterName is the cluster_name global parameter, as RabbitMQ keeps it,
// or the node's name.
func (s *Server) clusterName() string {
	if v, ok := s.globals.get("cluster_name"); ok {
		if name, isStr := v.(string); isStr && name != "" {
			return name
		}
	}
	return nodeName()
}

func (s *Server) getClusterName(w http.ResponseWriter, r *http.Request, p *principal) {
	writeJSON(w, http.StatusOK, item{"name": s.clusterName()})
}

// putClusterName sets the cluster_name global parameter.
func (s *Server) putClusterName(w http.ResponseWriter, r *http.Request, p *principal) {
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	name, ok := body["name"].(string)
	if !ok || name == "" {
		badRequest(w, "name must be a non-empty string")
		return
	}
	if _, err := s.globals.set("cluster_name", name); err != nil {
		s.log.Error("storing the cluster name", zap.Error(err))
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// nodeStats are the node's resource figures.
type nodeStats struct {
	res                      broker.Resources
	fdUsed, fdTotal, sockets int
	procUsed, runQueue       int
	gcNum                    uint64
}

func (s *Server) readNodeStats() nodeStats {
	ns := nodeStats{res: s.b.Resources(), procUsed: runtime.NumGoroutine()}
	ns.fdUsed, ns.fdTotal = fileDescriptors()
	ns.sockets = s.b.ConnectionCount()
	// runtime/metrics, unlike runtime.ReadMemStats, does not stop the world.
	samples := []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(samples)
	if samples[0].Value.Kind() == metrics.KindUint64 {
		ns.runQueue = int(samples[0].Value.Uint64())
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		ns.gcNum = samples[1].Value.Uint64()
	}
	return ns
}

// fileDescriptors counts the process's open file descriptors and its
// limit (Linux /proc; 0 where unknown).
func fileDescriptors() (used, limit int) {
	used = openFiles()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		limit = int(min(rl.Cur, 1<<31-1))
	}
	return used, limit
}

func nodeValues(ns nodeStats) *values {
	var v values
	v[fMemUsed] = float64(ns.res.MemUsed)
	v[fDiskFree] = float64(ns.res.DiskFree)
	v[fFDUsed] = float64(ns.fdUsed)
	v[fSocketsUsed] = float64(ns.sockets)
	v[fProcUsed] = float64(ns.procUsed)
	return &v
}

var nodeFields = []statField{
	{"mem_used", fMemUsed}, {"disk_free", fDiskFree}, {"fd_used", fFDUsed},
	{"sockets_used", fSocketsUsed}, {"proc_used", fProcUsed},
}

var nodeKey = seriesKey{kind: kindNode}

func (s *Server) nodeJSON(rs ranges) item {
	alarms := s.b.Alarms()
	ns := s.readNodeStats()
	v := s.rates.view(nodeKey, rs)
	it := item{
		"name":                     nodeName(),
		"type":                     "disc",
		"running":                  true,
		"mem_limit":                ns.res.MemLimit,
		"mem_alarm":                slices.Contains(alarms, broker.AlarmMemory),
		"mem_calculation_strategy": "allocated",
		"disk_free_limit":          ns.res.DiskFreeLimit,
		"disk_free_alarm":          slices.Contains(alarms, broker.AlarmDisk),
		"fd_total":                 ns.fdTotal,
		"sockets_total":            ns.fdTotal,
		"processors":               runtime.NumCPU(),
		"run_queue":                ns.runQueue,
		"gc_num":                   ns.gcNum,
		"uptime":                   time.Since(startTime).Milliseconds(),
		"os_pid":                   strconv.Itoa(osPID()),
		"partitions":               []string{},
		"cluster_links":            []item{},
		"rates_mode":               "basic",
		"db_dir":                   ns.res.DataDir,
		"auth_mechanisms":          authMechanisms(),
		"exchange_types":           exchangeTypes(),
		"contexts":                 s.contexts(),
		"enabled_plugins":          []string{},
	}
	statsInto(it, v, nodeValues(ns), nodeFields, classData)
	return churnInto(it, s.b.Churn(), s.rates.view(overallKey, rs))
}

// authMechanisms are the SASL mechanisms the broker offers.
func authMechanisms() []item {
	return []item{
		{"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": true},
		{"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": true},
		{"name": "EXTERNAL", "description": "TLS client certificate authentication (needs a client certificate)", "enabled": true},
	}
}

func (s *Server) getNodes(w http.ResponseWriter, r *http.Request, p *principal) {
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	if v := s.b.Cluster(); v != nil {
		items, err := s.clusterNodeItems(r, rs, v)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "cluster_unavailable", err.Error())
			return
		}
		writeList(w, r, items)
		return
	}
	writeList(w, r, []item{s.nodeJSON(rs)})
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request, p *principal) {
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	if v := s.b.Cluster(); v != nil {
		items, err := s.clusterNodeItems(r, rs, v)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "cluster_unavailable", err.Error())
			return
		}
		for _, it := range items {
			if it["name"] == pathValue(r, "node") {
				writeJSON(w, http.StatusOK, it)
				return
			}
		}
		notFound(w)
		return
	}
	if pathValue(r, "node") != nodeName() {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.nodeJSON(rs))
}

func (s *Server) getWhoami(w http.ResponseWriter, r *http.Request, p *principal) {
	tags := p.tags
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, http.StatusOK, item{"name": p.name, "tags": tags})
}

// getExtensions is GET /api/extensions: the management UI extensions
// (RabbitMQ's plugins' JavaScript); the console is built in, so none.
func (s *Server) getExtensions(w http.ResponseWriter, r *http.Request, p *principal) {
	writeJSON(w, http.StatusOK, []item{})
}

// seesConnection reports whether p may see a connection of user on vhost:
// monitors see all, others their own.
func seesConnection(p *principal, user string) bool {
	return p.monitor() || user == p.name
}

func (s *Server) connectionItems(w http.ResponseWriter, r *http.Request, p *principal, keep func(broker.ConnectionInfo) bool) {
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	var items []item
	for _, c := range s.b.Connections() {
		if seesConnection(p, c.User) && keep(c) {
			items = append(items, s.connectionJSON(c, rs))
		}
	}
	writeList(w, r, items)
}

func (s *Server) getConnections(w http.ResponseWriter, r *http.Request, p *principal) {
	s.connectionItems(w, r, p, func(broker.ConnectionInfo) bool { return true })
}

func (s *Server) getVHostConnections(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	s.connectionItems(w, r, p, func(c broker.ConnectionInfo) bool { return c.VHost == vhost })
}

func (s *Server) getConnection(w http.ResponseWriter, r *http.Request, p *principal) {
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	c, err := s.b.Connection(pathValue(r, "name"))
	if err != nil || !seesConnection(p, c.User) {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.connectionJSON(c, rs))
}

// deleteConnection closes a connection; the X-Reason header is the
// reason given to the client.
func (s *Server) deleteConnection(w http.ResponseWriter, r *http.Request, p *principal) {
	name := pathValue(r, "name")
	c, err := s.b.Connection(name)
	if err != nil || !seesConnection(p, c.User) {
		notFound(w)
		return
	}
	if !p.admin() && c.User != p.name {
		unauthorised(w, r, "Not administrator user")
		return
	}
	if err := s.b.CloseConnection(name, r.Header.Get("X-Reason")); err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) channelItems(w http.ResponseWriter, r *http.Request, p *principal, keep func(broker.ChannelInfo) bool) {
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	var items []item
	for _, c := range s.b.Channels() {
		if seesConnection(p, c.User) && keep(c) {
			items = append(items, s.channelJSON(c, rs))
		}
	}
	writeList(w, r, items)
}

func (s *Server) getChannels(w http.ResponseWriter, r *http.Request, p *principal) {
	s.channelItems(w, r, p, func(broker.ChannelInfo) bool { return true })
}

// getChannel describes one channel, named as RabbitMQ names it:
// "<connection> (<number>)".
func (s *Server) getChannel(w http.ResponseWriter, r *http.Request, p *principal) {
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	name := pathValue(r, "name")
	for _, c := range s.b.Channels() {
		if channelName(c.Connection, c.Number) == name && seesConnection(p, c.User) {
			writeJSON(w, http.StatusOK, s.channelJSON(c, rs))
			return
		}
	}
	notFound(w)
}

func (s *Server) getVHostChannels(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	s.channelItems(w, r, p, func(c broker.ChannelInfo) bool { return c.VHost == vhost })
}

func (s *Server) getConnectionChannels(w http.ResponseWriter, r *http.Request, p *principal) {
	name := pathValue(r, "name")
	c, err := s.b.Connection(name)
	if err != nil || !seesConnection(p, c.User) {
		notFound(w)
		return
	}
	s.channelItems(w, r, p, func(c broker.ChannelInfo) bool { return c.Connection == name })
}

func (s *Server) getConsumers(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.optionalVHost(w, r, p)
	if !ok {
		return
	}
	cs, err := s.b.Consumers(vhost)
	if err != nil {
		s.brokerError(w, err)
		return
	}
	users := map[string]string{}
	for _, c := range s.b.Connections() {
		users[c.Name] = c.User
	}
	visible := s.visibleVHosts(p)
	var items []item
	for _, c := range cs {
		if visible(c.VHost) {
			items = append(items, consumerJSON(c, users[c.Connection]))
		}
	}
	writeList(w, r, items)
}
