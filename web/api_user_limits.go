package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/warrenmq/warren/broker"
)

// User limits, as RabbitMQ's management API serves them:
// GET /api/user-limits, GET /api/user-limits/{user} (a list of
// {"user", "value": {limit: n}}, only users with limits), and
// PUT/DELETE /api/user-limits/{user}/{name} with {"value": n}.

func (s *Server) userLimitsRoutes(h func(pattern string, lvl level, fn handlerFunc)) {
	h("GET /api/user-limits", levelManagement, s.getUserLimits)
	h("GET /api/user-limits/{user}", levelManagement, s.getUserLimits)
	h("PUT /api/user-limits/{user}/{name}", levelAdmin, s.putUserLimit)
	h("DELETE /api/user-limits/{user}/{name}", levelAdmin, s.deleteUserLimit)
}

func (s *Server) getUserLimits(w http.ResponseWriter, r *http.Request, p *principal) {
	name := pathValue(r, "user")
	out := []item{}
	found := false
	for _, u := range s.b.Users() {
		if name != "" && u.Name != name {
			continue
		}
		found = true
		if len(u.Limits) > 0 {
			out = append(out, item{"user": u.Name, "value": u.Limits})
		}
	}
	if name != "" && !found {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) putUserLimit(w http.ResponseWriter, r *http.Request, p *principal) {
	user, name := pathValue(r, "user"), pathValue(r, "name")
	n, ok := limitFromBody(w, r, name)
	if !ok {
		return
	}
	if name != broker.UserLimitMaxConnections && name != broker.UserLimitMaxChannels {
		badRequest(w, fmt.Sprintf("Unrecognised terms [{<<%q>>,%d}] in user-limits", name, n))
		return
	}
	s.userLimitsError(w, user, s.b.SetUserLimits(user, map[string]int64{name: n}))
}

func (s *Server) deleteUserLimit(w http.ResponseWriter, r *http.Request, p *principal) {
	user := pathValue(r, "user")
	s.userLimitsError(w, user, s.b.ClearUserLimit(user, pathValue(r, "name")))
}

// userLimitsError answers a change of user limits: 204, or 400 with
// RabbitMQ's reasons (a missing user is a bad request there, not a 404).
func (s *Server) userLimitsError(w http.ResponseWriter, user string, err error) {
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, broker.ErrNotFound):
		writeJSON(w, http.StatusBadRequest, item{"error": "bad_request", "reason": []string{"no_such_user", user}})
	case errors.Is(err, broker.ErrInvalidUserLimit):
		badRequest(w, err.Error())
	default:
		s.brokerError(w, err)
	}
}

// limitFromBody reads the {"value": n} body of a PUT of limit name,
// answering 400 as RabbitMQ does when it is not one.
func limitFromBody(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil || body == nil {
		badRequest(w, "not_json")
		return 0, false
	}
	raw, ok := body["value"]
	if !ok {
		badRequest(w, "[{key_missing,value}]")
		return 0, false
	}
	n, err := limitValue(name, raw)
	if err != nil {
		badRequest(w, err.Error())
		return 0, false
	}
	return n, true
}

// limitValue reads a limit's JSON value: an integer, as RabbitMQ takes it.
func limitValue(name string, v any) (int64, error) {
	if num, ok := v.(json.Number); ok {
		if n, err := strconv.ParseInt(num.String(), 10, 64); err == nil {
			return n, nil
		}
		return 0, fmt.Errorf("%s should be a number, actually was %s", name, num)
	}
	if s, ok := v.(string); ok {
		return 0, fmt.Errorf("%s should be a number, actually was <<%q>>", name, s)
	}
	b, _ := json.Marshal(v)
	return 0, fmt.Errorf("%s should be a number, actually was %s", name, b)
}

// limitsFromJSON reads a "limits" object of a user (definitions, PUT
// /api/users): nil when absent or empty.
func limitsFromJSON(v any) (map[string]int64, error) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]int64, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		n, err := limitValue(k, m[k])
		if err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, nil
}
