package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Health checks, as RabbitMQ's /api/health/checks: 200 {"status":"ok"}
// or 503 {"status":"failed","reason":...}. Every vhost is always running.

func (s *Server) healthOK(w http.ResponseWriter, r *http.Request, p *principal) {
	writeJSON(w, http.StatusOK, item{"status": "ok"})
}

// healthAlarms fails while a memory or disk alarm is on.
func (s *Server) healthAlarms(w http.ResponseWriter, r *http.Request, p *principal) {
	on := s.b.Alarms()
	if len(on) == 0 {
		writeJSON(w, http.StatusOK, item{"status": "ok"})
		return
	}
	alarms := make([]item, 0, len(on))
	for _, a := range on {
		alarms = append(alarms, item{"node": nodeName(), "resource": a})
	}
	writeJSON(w, http.StatusServiceUnavailable, item{
		"status": "failed", "reason": "There are alarms in effect in the cluster", "alarms": alarms,
	})
}

func (s *Server) healthPort(w http.ResponseWriter, r *http.Request, p *principal) {
	port, err := strconv.Atoi(pathValue(r, "port"))
	if err != nil {
		badRequest(w, "port must be a number")
		return
	}
	var ports []int
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
