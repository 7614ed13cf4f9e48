package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Policies, operator policies, runtime parameters and vhost limits:
// GET /api/policies[/vhost[/name]], PUT and DELETE /api/policies/vhost/name,
// the same under /api/operator-policies, /api/parameters[...],
// /api/global-parameters[/name] and GET /api/vhost-limits[/vhost].
//
// Policies are the broker's (broker/policy.go). Warren has no runtime
// parameter components (no federation, no shovel): as on a RabbitMQ
// without those plugins, the parameter lists are empty and setting one is
// refused. Global parameters are free-form and kept in memory.

func (s *Server) policyRoutes(h func(string, level, handlerFunc)) {
	for _, kind := range []struct {
		base     string
		operator bool
	}{{"/api/policies", false}, {"/api/operator-policies", true}} {
		op := kind.operator
		h("GET "+kind.base, levelManagement, s.getPolicies(op))
		h("GET "+kind.base+"/{vhost}", levelManagement, s.getPolicies(op))
		h("GET "+kind.base+"/{vhost}/{name}", levelManagement, s.getPolicy(op))
		h("PUT "+kind.base+"/{vhost}/{name}", levelManagement, s.putPolicy(op))
		h("DELETE "+kind.base+"/{vhost}/{name}", levelManagement, s.deletePolicy(op))
	}
	h("GET /api/parameters", levelManagement, s.getParameters)
	h("GET /api/parameters/{component}", levelManagement, s.getParameters)
	h("GET /api/parameters/{component}/{vhost}", levelManagement, s.getParameters)
	h("GET /api/parameters/{component}/{vhost}/{name}", levelManagement, s.getParameter)
	h("PUT /api/parameters/{component}/{vhost}/{name}", levelManagement, s.putParameter)
	h("DELETE /api/parameters/{component}/{vhost}/{name}", levelManagement, s.getParameter)
	h("GET /api/global-parameters", levelAdmin, s.getGlobalParameters)
	h("GET /api/global-parameters/{name}", levelAdmin, s.getGlobalParameter)
	h("PUT /api/global-parameters/{name}", levelAdmin, s.putGlobalParameter)
	h("DELETE /api/global-parameters/{name}", levelAdmin, s.deleteGlobalParameter)
	h("GET /api/vhost-limits", levelManagement, s.getVHostLimits)
	h("GET /api/vhost-limits/{vhost}", levelManagement, s.getVHostLimits)
	h("PUT /api/vhost-limits/{vhost}/{name}", levelAdmin, s.putVHostLimit)
	h("DELETE /api/vhost-limits/{vhost}/{name}", levelAdmin, s.deleteVHostLimit)
}

// policyAccess reports whether p may see and change the (operator)
// policies of vhost v, answering 401 when not: policies need the
// policymaker tag and access to the vhost, or administrator; operator
// policies need administrator.
func (s *Server) policyAccess(w http.ResponseWriter, p *principal, v string, operator bool) bool {
	ok := p.admin() || (!operator && p.has("policymaker") && (v == "" || slices.Contains(s.b.UserVHosts(p.name), v)))
	if !ok {
		writeError(w, http.StatusUnauthorized, "not_authorised", "User not authorised to access object")
	}
	return ok
}

func policyJSON(pi broker.PolicyInfo) item {
	def := amqp.TableJSON(pi.Definition)
	return item{"vhost": pi.VHost, "name": pi.Name, "pattern": pi.Pattern, "apply-to": pi.ApplyTo,
		"definition": def, "priority": pi.Priority}
}

// policies lists the (operator) policies of vhost, or of every vhost p may
// see when vhost is empty.
func (s *Server) policies(p *principal, vhost string, operator bool) []item {
	var vhosts []string
	if vhost != "" {
		vhosts = []string{vhost}
	} else {
		for _, v := range s.b.VHosts() {
			vhosts = append(vhosts, v.Name)
		}
	}
	items := []item{}
	for _, v := range vhosts {
		if !p.admin() && !slices.Contains(s.b.UserVHosts(p.name), v) {
			continue
		}
		ps, err := s.b.Policies(v)
		if err != nil {
			continue
		}
		for _, pi := range ps {
			if pi.Operator == operator {
				items = append(items, policyJSON(pi))
			}
		}
	}
	return items
}

func (s *Server) getPolicies(operator bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		vhost := ""
		if pathValue(r, "vhost") != "" {
			var ok bool
			if vhost, ok = s.vhostParam(w, r, p); !ok {
				return
			}
		}
		if !s.policyAccess(w, p, vhost, operator) {
			return
		}
		writeList(w, r, s.policies(p, vhost, operator))
	}
}

func (s *Server) findPolicy(vhost, name string, operator bool) (broker.PolicyInfo, bool) {
	ps, _ := s.b.Policies(vhost)
	i := slices.IndexFunc(ps, func(pi broker.PolicyInfo) bool { return pi.Name == name && pi.Operator == operator })
	if i < 0 {
		return broker.PolicyInfo{}, false
	}
	return ps[i], true
}

func (s *Server) getPolicy(operator bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		vhost, ok := s.vhostParam(w, r, p)
		if !ok || !s.policyAccess(w, p, vhost, operator) {
			return
		}
		pi, ok := s.findPolicy(vhost, pathValue(r, "name"), operator)
		if !ok {
			notFound(w)
			return
		}
		writeJSON(w, http.StatusOK, policyJSON(pi))
	}
}

func (s *Server) putPolicy(operator bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		vhost, ok := s.vhostParam(w, r, p)
		if !ok || !s.policyAccess(w, p, vhost, operator) {
			return
		}
		var body map[string]any
		if err := decodeBody(r, &body, maxBody); err != nil {
			badRequest(w, err.Error())
			return
		}
		name := pathValue(r, "name")
		_, existed := s.findPolicy(vhost, name, operator)
		if err := s.applyPolicy(vhost, name, body, operator); err != nil {
			s.policyError(w, err)
			return
		}
		if existed {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
}

// applyPolicy sets a policy from a policies endpoint or definitions
// object: pattern, definition, priority (default 0) and apply-to
// (default all).
func (s *Server) applyPolicy(vhost, name string, body map[string]any, operator bool) error {
	pattern, ok := body["pattern"].(string)
	if !ok {
		return fmt.Errorf("%w: pattern must be a string", broker.ErrInvalidPolicy)
	}
	defIn, ok := body["definition"].(map[string]any)
	if !ok {
		return fmt.Errorf("%w: definition must be an object", broker.ErrInvalidPolicy)
	}
	def := make(map[string]any, len(defIn))
	for k, v := range defIn {
		def[k] = valueFromJSON(v)
	}
	priority := 0
	switch x := body["priority"].(type) {
	case nil:
	case json.Number:
		n, err := strconv.Atoi(x.String())
		if err != nil {
			return fmt.Errorf("%w: priority must be an integer", broker.ErrInvalidPolicy)
		}
		priority = n
	case float64:
		priority = int(x)
	case string: // rabbitmqadmin sends it as a string
		n, err := strconv.Atoi(x)
		if err != nil {
			return fmt.Errorf("%w: priority must be an integer", broker.ErrInvalidPolicy)
		}
		priority = n
	default:
		return fmt.Errorf("%w: priority must be an integer", broker.ErrInvalidPolicy)
	}
	applyTo, _ := body["apply-to"].(string)
	return s.b.SetPolicy(vhost, name, pattern, applyTo, priority, def, operator)
}

// policyError answers a refused policy as RabbitMQ does: 400 with the
// validation failure.
func (s *Server) policyError(w http.ResponseWriter, err error) {
	if errors.Is(err, broker.ErrInvalidPolicy) {
		badRequest(w, "Validation failed\n\n"+err.Error()+"\n")
		return
	}
	s.brokerError(w, err)
}

func (s *Server) deletePolicy(operator bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		vhost, ok := s.vhostParam(w, r, p)
		if !ok || !s.policyAccess(w, p, vhost, operator) {
			return
		}
		if err := s.b.ClearPolicy(vhost, pathValue(r, "name"), operator); err != nil {
			s.brokerError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// Runtime parameters: no components exist, so every list is empty, a
// single parameter is not found and setting one is refused as RabbitMQ
// refuses a component whose plugin is not enabled.

func (s *Server) getParameters(w http.ResponseWriter, r *http.Request, p *principal) {
	if pathValue(r, "vhost") != "" {
		if _, ok := s.vhostParam(w, r, p); !ok {
			return
		}
	}
	if !s.policyAccess(w, p, "", false) {
		return
	}
	writeList(w, r, []item{})
}

// getParameter serves GET and DELETE of one parameter: none exists.
func (s *Server) getParameter(w http.ResponseWriter, r *http.Request, p *principal) {
	if _, ok := s.vhostParam(w, r, p); !ok || !s.policyAccess(w, p, "", false) {
		return
	}
	notFound(w)
}

func (s *Server) putParameter(w http.ResponseWriter, r *http.Request, p *principal) {
	if _, ok := s.vhostParam(w, r, p); !ok || !s.policyAccess(w, p, "", false) {
		return
	}
	badRequest(w, parameterRefusal(pathValue(r, "component")))
}

func parameterRefusal(component string) string {
	return fmt.Sprintf("Validation failed\n\ncomponent %s not found\n", component)
}

// globalParams are the broker's global parameters, with JSON values.
type globalParams struct{ b *broker.Broker }

func (g globalParams) list() []item {
	ps := g.b.GlobalParameters()
	items := make([]item, 0, len(ps))
	for _, p := range ps {
		var v any
		_ = json.Unmarshal(p.Value, &v)
		items = append(items, item{"name": p.Name, "value": v})
	}
	return items
}

func (g globalParams) get(name string) (any, bool) {
	raw, ok := g.b.GlobalParameterValue(name)
	if !ok {
		return nil, false
	}
	var v any
	_ = json.Unmarshal(raw, &v)
	return v, true
}

// set stores a value and reports whether the name was new.
func (g globalParams) set(name string, v any) (bool, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	return g.b.SetGlobalParameter(name, raw)
}

func (g globalParams) delete(name string) (bool, error) {
	return g.b.DeleteGlobalParameter(name)
}

func (s *Server) getGlobalParameters(w http.ResponseWriter, r *http.Request, p *principal) {
	writeList(w, r, s.globals.list())
}

func (s *Server) getGlobalParameter(w http.ResponseWriter, r *http.Request, p *principal) {
	name := pathValue(r, "name")
	v, ok := s.globals.get(name)
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, item{"name": name, "value": v})
}

func (s *Server) putGlobalParameter(w http.ResponseWriter, r *http.Request, p *principal) {
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	v, ok := body["value"]
	if !ok {
		badRequest(w, "value must be set")
		return
	}
	created, err := s.globals.set(pathValue(r, "name"), v)
	if err != nil {
		s.log.Error("storing a global parameter", zap.Error(err))
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	if created {
		w.WriteHeader(http.StatusCreated)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteGlobalParameter(w http.ResponseWriter, r *http.Request, p *principal) {
	found, err := s.globals.delete(pathValue(r, "name"))
	if err != nil {
		s.log.Error("deleting a global parameter", zap.Error(err))
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	if !found {
		notFound(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getVHostLimits lists the vhosts' limits: the node's per-vhost limits
// (the same for every vhost), overridden by each vhost's own
// (api_vhost_limits.go); vhosts with none are left out.
func (s *Server) getVHostLimits(w http.ResponseWriter, r *http.Request, p *principal) {
	vhosts := []string{}
	if pathValue(r, "vhost") != "" {
		v, ok := s.vhostParam(w, r, p)
		if !ok {
			return
		}
		vhosts = append(vhosts, v)
	} else {
		visible := s.visibleVHosts(p)
		for _, v := range s.b.VHosts() {
			if visible(v.Name) {
				vhosts = append(vhosts, v.Name)
			}
		}
	}
	items := []item{}
	for _, v := range vhosts {
		if value := s.vhostLimitsValue(v); len(value) > 0 {
			items = append(items, item{"vhost": v, "value": value})
		}
	}
	writeJSON(w, http.StatusOK, items)
}
