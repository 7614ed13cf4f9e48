package web

import (
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/broker"
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
	o := s.b.Overview()
	rt := s.rates.totals()
	writeJSON(w, http.StatusOK, item{
		"management_version": broker.Version,
		"rabbitmq_version":   broker.Version,
		"product_name":       "Warren",
		"product_version":    broker.Version,
		"cluster_name":       s.clusterName(),
		"node":               nodeName(),
		"erlang_version":     runtime.Version(),
		"rates_mode":         "basic",
		"message_stats":      messageStatsJSON(o.Totals, rt),
		"queue_totals": item{
			"messages":                        o.Ready + o.Unacked,
			"messages_details":                details(rt.Messages),
			"messages_ready":                  o.Ready,
			"messages_ready_details":          details(rt.Ready),
			"messages_unacknowledged":         o.Unacked,
			"messages_unacknowledged_details": details(rt.Unacked),
		},
		"object_totals": item{
			"connections": o.Connections,
			"channels":    o.Channels,
			"exchanges":   o.Exchanges,
			"queues":      o.Queues,
			"consumers":   o.Consumers,
		},
		"listeners": s.listeners(),
		"contexts":  []item{{"node": nodeName(), "description": "Warren Management", "path": "/"}},
	})
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

func (s *Server) nodeJSON() item {
	alarms := s.b.Alarms()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return item{
		"name":            nodeName(),
		"type":            "disc",
		"running":         true,
		"mem_used":        ms.Sys,
		"mem_alarm":       slices.Contains(alarms, broker.AlarmMemory),
		"disk_free_alarm": slices.Contains(alarms, broker.AlarmDisk),
		"processors":      runtime.NumCPU(),
		"proc_used":       runtime.NumGoroutine(),
		"uptime":          time.Since(startTime).Milliseconds(),
		"os_pid":          strconv.Itoa(osPID()),
	}
}

func (s *Server) getNodes(w http.ResponseWriter, r *http.Request, p *principal) {
	writeList(w, r, []item{s.nodeJSON()})
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request, p *principal) {
	if pathValue(r, "node") != nodeName() {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, s.nodeJSON())
}

func (s *Server) getWhoami(w http.ResponseWriter, r *http.Request, p *principal) {
	tags := p.tags
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, http.StatusOK, item{"name": p.name, "tags": tags})
}

// seesConnection reports whether p may see a connection of user on vhost:
// monitors see all, others their own.
func seesConnection(p *principal, user string) bool {
	return p.monitor() || user == p.name
}

func (s *Server) connectionItems(p *principal, keep func(broker.ConnectionInfo) bool) []item {
	var items []item
	for _, c := range s.b.Connections() {
		if seesConnection(p, c.User) && keep(c) {
			items = append(items, connectionJSON(c))
		}
	}
	return items
}

func (s *Server) getConnections(w http.ResponseWriter, r *http.Request, p *principal) {
	writeList(w, r, s.connectionItems(p, func(broker.ConnectionInfo) bool { return true }))
}

func (s *Server) getVHostConnections(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	writeList(w, r, s.connectionItems(p, func(c broker.ConnectionInfo) bool { return c.VHost == vhost }))
}

func (s *Server) getConnection(w http.ResponseWriter, r *http.Request, p *principal) {
	c, err := s.b.Connection(pathValue(r, "name"))
	if err != nil || !seesConnection(p, c.User) {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, connectionJSON(c))
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

func (s *Server) channelItems(p *principal, keep func(broker.ChannelInfo) bool) []item {
	var items []item
	for _, c := range s.b.Channels() {
		if seesConnection(p, c.User) && keep(c) {
			items = append(items, channelJSON(c))
		}
	}
	return items
}

func (s *Server) getChannels(w http.ResponseWriter, r *http.Request, p *principal) {
	writeList(w, r, s.channelItems(p, func(broker.ChannelInfo) bool { return true }))
}

func (s *Server) getVHostChannels(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	writeList(w, r, s.channelItems(p, func(c broker.ChannelInfo) bool { return c.VHost == vhost }))
}

func (s *Server) getConnectionChannels(w http.ResponseWriter, r *http.Request, p *principal) {
	name := pathValue(r, "name")
	c, err := s.b.Connection(name)
	if err != nil || !seesConnection(p, c.User) {
		notFound(w)
		return
	}
	writeList(w, r, s.channelItems(p, func(c broker.ChannelInfo) bool { return c.Connection == name }))
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
