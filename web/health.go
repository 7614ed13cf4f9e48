package web

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Health checks, as RabbitMQ 3.10's /api/health/checks and the legacy
// /api/healthchecks/node: 200 {"status":"ok",...} or 503
// {"status":"failed","reason":...} with the same extra fields, and 400
// for a malformed parameter, with RabbitMQ's texts. Warren runs one node:
// every vhost is always running, and no queue depends on another node.

func (s *Server) healthOK(w http.ResponseWriter, r *http.Request, p *principal) {
	writeJSON(w, http.StatusOK, item{"status": "ok"})
}

// RabbitMQ 3.10 has no ready-to-serve-clients check (its API answers 404
// there); RabbitMQ 4.1 added it with is-in-service and
// below-node-connection-limit, and Warren answers the three as 4.1 does.

// healthReady is /api/health/checks/ready-to-serve-clients: the node
// serves (is-in-service), an AMQP or AMQPS listener is open, and it is
// below its connection limit.
func (s *Server) healthReady(w http.ResponseWriter, r *http.Request, p *principal) {
	n := s.b.NodeState()
	switch {
	case n.Closed:
		healthFailed(w, item{"reason": "the rabbit node is not currently available to serve"})
	case !n.Listening:
		healthFailed(w, item{"reason": "no active listeners for AMQP/AMQPS"})
	case n.AtConnectionLimit():
		healthFailed(w, item{"reason": "node connection limit is reached", "connections": n.Connections})
	default:
		writeJSON(w, http.StatusOK, item{"status": "ok"})
	}
}

// healthInService is /api/health/checks/is-in-service.
func (s *Server) healthInService(w http.ResponseWriter, r *http.Request, p *principal) {
	if n := s.b.NodeState(); n.Closed || !n.Listening {
		healthFailed(w, item{"reason": "the rabbit node is not currently available to serve"})
		return
	}
	writeJSON(w, http.StatusOK, item{"status": "ok"})
}

// healthBelowConnectionLimit is
// /api/health/checks/below-node-connection-limit.
func (s *Server) healthBelowConnectionLimit(w http.ResponseWriter, r *http.Request, p *principal) {
	if s.b.NodeState().AtConnectionLimit() {
		healthFailed(w, item{"reason": "node connection limit is reached"})
		return
	}
	writeJSON(w, http.StatusOK, item{"status": "ok"})
}

// healthFailed answers 503 {"status":"failed", fields...}.
func healthFailed(w http.ResponseWriter, fields item) {
	fields["status"] = "failed"
	writeJSON(w, http.StatusServiceUnavailable, fields)
}

// healthSingleNode answers the checks about other cluster members, as
// RabbitMQ answers them on a single node.
func (s *Server) healthSingleNode(w http.ResponseWriter, r *http.Request, p *principal) {
	writeJSON(w, http.StatusOK, item{"status": "ok", "reason": "single node cluster"})
}

func (s *Server) alarmItems() []item {
	on := s.b.Alarms()
	alarms := make([]item, 0, len(on))
	for _, a := range on {
		alarms = append(alarms, item{"node": nodeName(), "resource": a})
	}
	return alarms
}

// healthAlarms fails while a memory or disk alarm is on.
func (s *Server) healthAlarms(w http.ResponseWriter, r *http.Request, p *principal) {
	s.writeAlarms(w, "There are alarms in effect in the cluster")
}

// healthLocalAlarms is healthAlarms for this node.
func (s *Server) healthLocalAlarms(w http.ResponseWriter, r *http.Request, p *principal) {
	s.writeAlarms(w, "There are alarms in effect on the node")
}

// writeAlarms answers ok with no alarm on, else 503 with reason and the
// alarms.
func (s *Server) writeAlarms(w http.ResponseWriter, reason string) {
	alarms := s.alarmItems()
	if len(alarms) == 0 {
		writeJSON(w, http.StatusOK, item{"status": "ok"})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, item{"status": "failed", "reason": reason, "alarms": alarms})
}

// healthNode is the legacy /api/healthchecks/node[/{node}]: it fails
// while an alarm is on.
func (s *Server) healthNode(w http.ResponseWriter, r *http.Request, p *principal) {
	if n := pathValue(r, "node"); n != "" && n != nodeName() {
		notFound(w)
		return
	}
	if on := s.b.Alarms(); len(on) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, item{
			"status": "failed", "reason": "resource alarm(s) in effect:[" + strings.Join(on, ",") + "]",
		})
		return
	}
	writeJSON(w, http.StatusOK, item{"status": "ok"})
}

func (s *Server) healthPort(w http.ResponseWriter, r *http.Request, p *principal) {
	port, err := strconv.Atoi(pathValue(r, "port"))
	if err != nil {
		badRequest(w, "Invalid port")
		return
	}
	ports := []int{}
	for _, l := range s.listeners() {
		lp, _ := l["port"].(int)
		if lp == port {
			writeJSON(w, http.StatusOK, item{"status": "ok", "port": port})
			return
		}
		ports = append(ports, lp)
	}
	writeJSON(w, http.StatusServiceUnavailable, item{
		"status": "failed", "reason": "No active listener", "missing": port, "ports": ports,
	})
}

// protocolAliases are the other names RabbitMQ accepts for a protocol.
var protocolAliases = map[string]string{
	"amqp091": "amqp", "amqp0-9-1": "amqp", "amqp0.9.1": "amqp",
	"amqps": "amqp/ssl", "amqp091/ssl": "amqp/ssl",
	"prometheus": "http/prometheus", "management": "http", "https": "https",
}

func (s *Server) healthProtocol(w http.ResponseWriter, r *http.Request, p *principal) {
	want := strings.ToLower(pathValue(r, "protocol"))
	if a, ok := protocolAliases[want]; ok {
		want = a
	}
	protocols := []string{}
	for _, l := range s.listeners() {
		lp, _ := l["protocol"].(string)
		if lp == want {
			writeJSON(w, http.StatusOK, item{"status": "ok", "protocol": want})
			return
		}
		protocols = append(protocols, lp)
	}
	writeJSON(w, http.StatusServiceUnavailable, item{
		"status": "failed", "reason": "No active listener", "missing": pathValue(r, "protocol"), "protocols": protocols,
	})
}

// healthCertificates fails when a TLS listener's certificate expires
// within the given time: /api/health/checks/certificate-expiration/
// {within}/{unit}, unit days, weeks, months or years.
func (s *Server) healthCertificates(w http.ResponseWriter, r *http.Request, p *principal) {
	within, err := strconv.Atoi(pathValue(r, "within"))
	if err != nil || within < 0 {
		badRequest(w, "Invalid expiration value.")
		return
	}
	now := time.Now()
	var limit time.Time
	switch pathValue(r, "unit") {
	case "days":
		limit = now.AddDate(0, 0, within)
	case "weeks":
		limit = now.AddDate(0, 0, 7*within)
	case "months":
		limit = now.AddDate(0, within, 0)
	case "years":
		limit = now.AddDate(within, 0, 0)
	default:
		badRequest(w, "Time unit not recognised. Supported units: days, weeks, months, years.")
		return
	}
	expired := []item{}
	for _, l := range s.tlsListeners() {
		for _, cert := range l.certs {
			if cert.NotAfter.Before(limit) {
				expired = append(expired, item{
					"node": nodeName(), "protocol": l.protocol, "interface": l.host, "port": l.port,
					"expired": cert.NotAfter.UTC().Format(time.RFC3339), "subject": cert.Subject.String(),
				})
			}
		}
	}
	if len(expired) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, item{"status": "failed", "reason": "Certificates expiring", "expired": expired})
		return
	}
	writeJSON(w, http.StatusOK, item{"status": "ok"})
}

// tlsListener is a TLS listener's address and certificates (leaves).
type tlsListener struct {
	protocol, host string
	port           int
	certs          []*x509.Certificate
}

func (s *Server) tlsListeners() []tlsListener {
	var out []tlsListener
	add := func(proto string, a net.Addr, cfg *tls.Config) {
		if cfg == nil {
			return
		}
		l := tlsListener{protocol: proto}
		l.host, l.port = splitHostPort(a)
		for _, c := range cfg.Certificates {
			leaf := c.Leaf
			if leaf == nil && len(c.Certificate) > 0 {
				leaf, _ = x509.ParseCertificate(c.Certificate[0])
			}
			if leaf != nil && !slices.Contains(l.certs, leaf) {
				l.certs = append(l.certs, leaf)
			}
		}
		out = append(out, l)
	}
	if a := s.b.AMQPSAddr(); a != nil {
		add("amqp/ssl", a, s.b.AMQPSTLS())
	}
	if a := s.HTTPSAddr(); a != nil {
		add("https", a, s.cfg.TLS)
	}
	return out
}

// aliveness declares the queue aliveness-test in the vhost, publishes a
// message to it and gets it back.
func (s *Server) aliveness(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	const q = "aliveness-test"
	fail := func(reason string) {
		writeJSON(w, http.StatusServiceUnavailable, item{"status": "failed", "reason": reason})
	}
	if err := s.b.DeclareQueue(vhost, "", broker.QueueSpec{Name: q, Durable: false}); err != nil {
		fail(err.Error())
		return
	}
	body := []byte("test_message " + strconv.FormatInt(time.Now().UnixNano(), 10))
	if _, err := s.b.Publish(vhost, "", "", q, amqp.Properties{}, body); err != nil {
		fail(err.Error())
		return
	}
	msgs, err := s.b.Get(vhost, "", q, 1, false)
	if err != nil || len(msgs) == 0 {
		fail("message not received")
		return
	}
	writeJSON(w, http.StatusOK, item{"status": "ok"})
}
