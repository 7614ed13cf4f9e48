package web

import (
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/warrenmq/warren/broker"
)

// Vhost limits, as RabbitMQ's management API serves them: PUT/DELETE
// /api/vhost-limits/{vhost}/{name} with {"value": n} (max-connections,
// max-queues); GET /api/vhost-limits[/{vhost}] in api_policies.go. In a
// definitions export or import they are RabbitMQ's runtime parameters of
// component vhost-limits, name "limits".

func (s *Server) putVHostLimit(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, name := pathValue(r, "vhost"), pathValue(r, "name")
	if !s.b.HasVHost(vhost) {
		notFound(w)
		return
	}
	n, ok := limitFromBody(w, r, name)
	if !ok {
		return
	}
	s.vhostLimitsError(w, s.b.SetVHostLimits(vhost, map[string]int64{name: n}))
}

func (s *Server) deleteVHostLimit(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost := pathValue(r, "vhost")
	if !s.b.HasVHost(vhost) {
		notFound(w)
		return
	}
	s.vhostLimitsError(w, s.b.ClearVHostLimit(vhost, pathValue(r, "name")))
}

// vhostLimitsError answers a change of vhost limits: 204, or 400.
func (s *Server) vhostLimitsError(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, broker.ErrInvalidVHostLimit):
		badRequest(w, err.Error())
	default:
		s.brokerError(w, err)
	}
}

// vhostLimitsValue is what GET /api/vhost-limits shows for a vhost: the
// vhost's own limits, each lowered to the node's (flags) where those are
// lower, since both apply, and the node's where the vhost has none.
func (s *Server) vhostLimitsValue(vhost string) item {
	maxConns, maxQueues := s.b.VHostLimits()
	node := map[string]int64{broker.VHostLimitMaxConnections: int64(maxConns), broker.VHostLimitMaxQueues: int64(maxQueues)}
	own, _ := s.b.VHostLimitsOf(vhost)
	value := item{}
	for _, k := range []string{broker.VHostLimitMaxConnections, broker.VHostLimitMaxQueues} {
		n, set := own[k]
		if flag := node[k]; flag > 0 && (!set || n < 0 || n > flag) {
			n, set = flag, true
		}
		if set {
			value[k] = n
		}
	}
	return value
}

// vhostLimitsParameters are the vhosts' own limits as RabbitMQ exports
// them: parameters of component vhost-limits, name "limits".
func (s *Server) vhostLimitsParameters(keep func(vhost string) bool) []item {
	out := []item{}
	for _, v := range s.b.VHosts() {
		if !keep(v.Name) {
			continue
		}
		if own, _ := s.b.VHostLimitsOf(v.Name); len(own) > 0 {
			out = append(out, item{"vhost": v.Name, "component": "vhost-limits", "name": "limits", "value": maps.Clone(own)})
		}
	}
	return out
}

// importVHostLimits applies a definitions parameter of component
// vhost-limits (the only component Warren knows).
func (s *Server) importVHostLimits(vhost string, pm map[string]any) error {
	m, ok := pm["value"].(map[string]any)
	if !ok {
		return fmt.Errorf("parameter %q: the value of vhost-limits must be an object", str(pm, "name"))
	}
	limits := make(map[string]int64, len(m))
	for k, v := range m {
		n, err := limitValue(k, v)
		if err != nil {
			return err
		}
		limits[k] = n
	}
	if len(limits) == 0 {
		return nil
	}
	return s.b.SetVHostLimits(vhost, limits)
}
