package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Access levels, as RabbitMQ's management user tags grant them.
type level uint8

const (
	// levelManagement: any of management, policymaker, monitoring or
	// administrator; sees the vhosts it has permissions on.
	levelManagement level = iota
	// levelMonitoring: monitoring or administrator; sees every
	// connection, channel and node.
	levelMonitoring
	// levelAdmin: administrator.
	levelAdmin
)

// principal is the authenticated user of a request.
type principal struct {
	name string
	tags []string
}

func (p *principal) has(tag string) bool { return slices.Contains(p.tags, tag) }

func (p *principal) admin() bool { return p.has("administrator") }

// monitor reports whether p sees everything (monitoring or administrator).
func (p *principal) monitor() bool { return p.admin() || p.has("monitoring") }

func (p *principal) management() bool {
	return p.monitor() || p.has("management") || p.has("policymaker")
}

func (p *principal) allows(l level) bool {
	switch l {
	case levelAdmin:
		return p.admin()
	case levelMonitoring:
		return p.monitor()
	}
	return p.management()
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, p *principal)

// maxBody bounds a request body; definitions may be large.
const (
	maxBody     = 16 << 20
	maxDefsBody = 256 << 20
)

// route is one entry of the management API's routing table: a method
// and a path pattern in http.ServeMux syntax.
type route struct {
	method, path string
	level        level
	f            handlerFunc
}

// apiRoutes is the management API's routing table.
func (s *Server) apiRoutes() []route {
	var rs []route
	h := func(pattern string, l level, f handlerFunc) {
		method, path, _ := strings.Cut(pattern, " ")
		rs = append(rs, route{method: method, path: path, level: l, f: f})
	}
	h("GET /api/overview", levelManagement, s.getOverview)
	h("GET /api/cluster-name", levelManagement, s.getClusterName)
	h("PUT /api/cluster-name", levelAdmin, s.putClusterName)
	h("GET /api/nodes", levelMonitoring, s.getNodes)
	h("GET /api/nodes/{node}", levelMonitoring, s.getNode)
	h("GET /api/cluster/status", levelMonitoring, s.getClusterStatus)
	h("POST /api/cluster/join", levelAdmin, s.postClusterJoin)
	h("POST /api/cluster/leave", levelAdmin, s.postClusterLeave)
	h("DELETE /api/cluster/nodes/{node}", levelAdmin, s.deleteClusterNode)
	h("GET /api/whoami", levelManagement, s.getWhoami)
	h("GET /api/extensions", levelManagement, s.getExtensions)
	h("GET /api/feature-flags", levelAdmin, s.getFeatureFlags)
	h("PUT /api/feature-flags/{name}/enable", levelAdmin, s.putFeatureFlagEnable)

	h("GET /api/connections", levelManagement, s.getConnections)
	h("GET /api/connections/{name}", levelManagement, s.getConnection)
	h("DELETE /api/connections/{name}", levelManagement, s.deleteConnection)
	h("GET /api/connections/{name}/channels", levelManagement, s.getConnectionChannels)
	h("GET /api/vhosts/{vhost}/connections", levelManagement, s.getVHostConnections)
	h("GET /api/channels", levelManagement, s.getChannels)
	h("GET /api/channels/{name}", levelManagement, s.getChannel)
	h("GET /api/vhosts/{vhost}/channels", levelManagement, s.getVHostChannels)
	h("GET /api/consumers", levelManagement, s.getConsumers)
	h("GET /api/consumers/{vhost}", levelManagement, s.getConsumers)

	h("GET /api/exchanges", levelManagement, s.getExchanges)
	h("GET /api/exchanges/{vhost}", levelManagement, s.getExchanges)
	h("GET /api/exchanges/{vhost}/{name}", levelManagement, s.getExchange)
	h("PUT /api/exchanges/{vhost}/{name}", levelManagement, s.putExchange)
	h("DELETE /api/exchanges/{vhost}/{name}", levelManagement, s.deleteExchange)
	h("POST /api/exchanges/{vhost}/{name}/publish", levelManagement, s.publish)
	h("GET /api/exchanges/{vhost}/{name}/bindings/source", levelManagement, s.getExchangeBindingsSource)
	h("GET /api/exchanges/{vhost}/{name}/bindings/destination", levelManagement, s.getExchangeBindingsDestination)

	h("GET /api/queues", levelManagement, s.getQueues)
	h("GET /api/queues/{vhost}", levelManagement, s.getQueues)
	h("GET /api/queues/{vhost}/{name}", levelManagement, s.getQueue)
	h("PUT /api/queues/{vhost}/{name}", levelManagement, s.putQueue)
	h("DELETE /api/queues/{vhost}/{name}", levelManagement, s.deleteQueue)
	h("DELETE /api/queues/{vhost}/{name}/contents", levelManagement, s.purgeQueue)
	h("POST /api/queues/{vhost}/{name}/get", levelManagement, s.getMessages)
	h("GET /api/queues/{vhost}/{name}/bindings", levelManagement, s.getQueueBindings)
	s.memberRoutes(h)
	h("PUT /api/super-streams/{vhost}/{name}", levelManagement, s.putSuperStream)
	h("GET /api/super-streams/{vhost}/{name}", levelManagement, s.getSuperStream)
	h("DELETE /api/super-streams/{vhost}/{name}", levelManagement, s.deleteSuperStream)

	h("GET /api/bindings", levelManagement, s.getBindings)
	h("GET /api/bindings/{vhost}", levelManagement, s.getBindings)
	for _, kind := range []string{"q", "e"} {
		base := "/api/bindings/{vhost}/e/{source}/" + kind + "/{dest}"
		toExchange := kind == "e"
		h("GET "+base, levelManagement, s.getBindingsBetween(toExchange))
		h("POST "+base, levelManagement, s.postBinding(toExchange))
		h("GET "+base+"/{props}", levelManagement, s.getBinding(toExchange))
		h("DELETE "+base+"/{props}", levelManagement, s.deleteBinding(toExchange))
	}

	h("GET /api/vhosts", levelManagement, s.getVHosts)
	h("GET /api/vhosts/{vhost}", levelManagement, s.getVHost)
	h("PUT /api/vhosts/{vhost}", levelAdmin, s.putVHost)
	h("DELETE /api/vhosts/{vhost}", levelAdmin, s.deleteVHost)
	h("GET /api/vhosts/{vhost}/permissions", levelAdmin, s.getVHostPermissions)

	h("GET /api/users", levelAdmin, s.getUsers)
	h("GET /api/users/{user}", levelAdmin, s.getUser)
	h("PUT /api/users/{user}", levelAdmin, s.putUser)
	h("DELETE /api/users/{user}", levelAdmin, s.deleteUser)
	h("GET /api/users/{user}/permissions", levelAdmin, s.getUserPermissions)
	h("GET /api/permissions", levelAdmin, s.getPermissions)
	h("GET /api/permissions/{vhost}/{user}", levelAdmin, s.getPermission)
	h("PUT /api/permissions/{vhost}/{user}", levelAdmin, s.putPermission)
	h("DELETE /api/permissions/{vhost}/{user}", levelAdmin, s.deletePermission)
	h("GET /api/topic-permissions", levelAdmin, s.getTopicPermissions)
	h("GET /api/topic-permissions/{vhost}/{user}", levelAdmin, s.getTopicPermission)
	h("PUT /api/topic-permissions/{vhost}/{user}", levelAdmin, s.putTopicPermission)
	h("DELETE /api/topic-permissions/{vhost}/{user}", levelAdmin, s.deleteTopicPermission)
	h("GET /api/users/{user}/topic-permissions", levelAdmin, s.getUserTopicPermissions)
	h("GET /api/vhosts/{vhost}/topic-permissions", levelAdmin, s.getVHostTopicPermissions)

	h("GET /api/definitions", levelAdmin, s.getDefinitions)
	h("POST /api/definitions", levelAdmin, s.postDefinitions)
	h("GET /api/definitions/{vhost}", levelAdmin, s.getDefinitions)
	h("POST /api/definitions/{vhost}", levelAdmin, s.postDefinitions)

	s.policyRoutes(h)
	s.userLimitsRoutes(h)

	h("GET /api/health/checks/alarms", levelManagement, s.healthAlarms)
	h("GET /api/health/checks/local-alarms", levelManagement, s.healthLocalAlarms)
	h("GET /api/health/checks/virtual-hosts", levelManagement, s.healthOK)
	h("GET /api/health/checks/ready-to-serve-clients", levelManagement, s.healthReady)
	h("GET /api/health/checks/is-in-service", levelManagement, s.healthInService)
	h("GET /api/health/checks/below-node-connection-limit", levelManagement, s.healthBelowConnectionLimit)
	h("GET /api/health/checks/node-is-quorum-critical", levelManagement, s.healthSingleNode)
	h("GET /api/health/checks/node-is-mirror-sync-critical", levelManagement, s.healthSingleNode)
	h("GET /api/health/checks/certificate-expiration/{within}/{unit}", levelManagement, s.healthCertificates)
	h("GET /api/health/checks/port-listener/{port}", levelManagement, s.healthPort)
	h("GET /api/health/checks/protocol-listener/{protocol}", levelManagement, s.healthProtocol)
	h("GET /api/healthchecks/node", levelManagement, s.healthNode)
	h("GET /api/healthchecks/node/{node}", levelManagement, s.healthNode)
	h("GET /api/aliveness-test/{vhost}", levelManagement, s.aliveness)
	return rs
}

// routes builds the API and console mux. Each path of the routing table
// is one mux entry whose handler dispatches on the method (methods).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	var paths []string
	byPath := make(map[string]map[string]http.Handler)
	for _, rt := range s.apiRoutes() {
		if byPath[rt.path] == nil {
			byPath[rt.path] = make(map[string]http.Handler)
			paths = append(paths, rt.path)
		}
		byPath[rt.path][rt.method] = s.auth(rt.level, rt.f)
	}
	for _, p := range paths {
		mux.Handle(p, methods(byPath[p]))
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "Object Not Found", "Not Found")
	})
	mux.Handle("/", consoleHandler())
	return normalisePath(mux)
}

// allowOrder is the order methods are listed in an Allow header, as
// RabbitMQ lists them.
var allowOrder = []string{http.MethodHead, http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodOptions}

// methods serves one path of the API with a handler per method, as
// RabbitMQ's resources do: HEAD is GET without the body; OPTIONS answers
// 200 with the Allow header and needs no login (CORS preflights send no
// credentials); any other method is 405 Method Not Allowed with the Allow
// header and no body, before any login.
func methods(hs map[string]http.Handler) http.Handler {
	var allow []string
	for _, m := range allowOrder {
		_, ok := hs[m]
		if ok || m == http.MethodOptions || m == http.MethodHead && hs[http.MethodGet] != nil {
			allow = append(allow, m)
		}
	}
	allowHeader := strings.Join(allow, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := r.Method
		if m == http.MethodHead {
			m = http.MethodGet
		}
		if h, ok := hs[m]; ok {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Allow", allowHeader)
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusMethodNotAllowed)
	})
}

// slashSentinel stands for an escaped slash (%2F) in a path segment while
// the mux routes: ServeMux cleans the unescaped path, so the vhost "/"
// (".../%2F/...") would otherwise not match. pathValue turns it back.
const slashSentinel = "\uFDD0"

// normalisePath prepares a request's path for the mux: escaped slashes
// become slashSentinel, and an API path loses one trailing slash, so that
// /api/connections/ is /api/connections and /api/queues/%2F/ lists the
// queues of "/" rather than naming the queue "" (RabbitMQ serves both
// forms of every path the same).
func normalisePath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, raw := r.URL.Path, r.URL.RawPath
		if raw != "" && strings.Contains(strings.ToUpper(raw), "%2F") {
			segs := strings.Split(raw, "/")
			for i, seg := range segs {
				seg = strings.ReplaceAll(strings.ReplaceAll(seg, "%2F", slashSentinel), "%2f", slashSentinel)
				if u, err := url.PathUnescape(seg); err == nil {
					segs[i] = u
				}
			}
			path, raw = strings.Join(segs, "/"), ""
		}
		if len(path) > len("/api/") && strings.HasPrefix(path, "/api/") && strings.HasSuffix(path, "/") {
			path, raw = path[:len(path)-1], strings.TrimSuffix(raw, "/")
		}
		if path != r.URL.Path || raw != r.URL.RawPath {
			r2 := new(http.Request)
			*r2 = *r
			u := *r.URL
			u.Path, u.RawPath = path, raw
			r2.URL = &u
			r = r2
		}
		next.ServeHTTP(w, r)
	})
}

// pathValue is r.PathValue with escaped slashes restored.
func pathValue(r *http.Request, name string) string {
	return strings.ReplaceAll(r.PathValue(name), slashSentinel, "/")
}

// auth checks HTTP basic credentials against the broker's users and the
// user's tags against l.
func (s *Server) auth(l level, f handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, pass, ok := r.BasicAuth()
		if !ok {
			unauthorised(w, r, "Login failed")
			return
		}
		u, ok := s.b.Authenticate(name, pass)
		if !ok {
			unauthorised(w, r, "Login failed")
			return
		}
		if s.b.LoopbackOnly(u.Name, r.RemoteAddr) {
			unauthorised(w, r, "User can only log in via localhost")
			return
		}
		p := &principal{name: u.Name, tags: u.Tags}
		if !p.management() {
			unauthorised(w, r, "Not management user")
			return
		}
		if !p.allows(l) {
			if l == levelAdmin {
				unauthorised(w, r, "Not administrator user")
			} else {
				unauthorised(w, r, "Not monitor user")
			}
			return
		}
		f(w, r, p)
	})
}

// unauthorised answers 401. Scripts of a page (the console) say so with
// X-Requested-With: XMLHttpRequest, and get no WWW-Authenticate challenge,
// as from RabbitMQ: it would make the browser pop up its own login dialog.
func unauthorised(w http.ResponseWriter, r *http.Request, reason string) {
	if r.Header.Get("X-Requested-With") != "XMLHttpRequest" {
		w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
	}
	writeError(w, http.StatusUnauthorized, "not_authorised", reason)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, errName, reason string) {
	writeJSON(w, status, map[string]string{"error": errName, "reason": reason})
}

func notFound(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, "Object Not Found", "Not Found")
}

func badRequest(w http.ResponseWriter, reason string) {
	writeError(w, http.StatusBadRequest, "bad_request", reason)
}

// brokerError answers with the status RabbitMQ's management API gives
// for err.
func (s *Server) brokerError(w http.ResponseWriter, err error) {
	var ae *amqp.Error
	switch {
	case errors.Is(err, broker.ErrNotFound):
		notFound(w)
	case errors.Is(err, broker.ErrExists), errors.Is(err, broker.ErrInvalid):
		badRequest(w, err.Error())
	case errors.As(err, &ae):
		switch ae.Code {
		case amqp.NotFound:
			notFound(w)
		case amqp.AccessRefused:
			writeError(w, http.StatusUnauthorized, "not_authorised", ae.Text)
		case amqp.InternalError:
			s.log.Error("management request failed", zap.Error(err))
			writeError(w, http.StatusInternalServerError, "internal_error", ae.Text)
		default:
			badRequest(w, bareReason(ae.Text))
		}
	default:
		badRequest(w, err.Error())
	}
}

// bareReason is an AMQP reply text without its leading reply name
// ("PRECONDITION_FAILED - "): RabbitMQ's API gives the rest as a 400's
// reason.
func bareReason(text string) string {
	i := strings.Index(text, " - ")
	if i <= 0 {
		return text
	}
	for _, c := range text[:i] {
		if (c < 'A' || c > 'Z') && c != '_' {
			return text
		}
	}
	return text[i+3:]
}

// decodeBody decodes a JSON request body into v, numbers as json.Number.
// An empty body leaves v as it is.
func decodeBody(r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, limit))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("malformed JSON body: %v", err)
	}
	return nil
}

// vhostParam returns the {vhost} path value, answering 404 for an unknown
// vhost and 401 for one the user may not see.
func (s *Server) vhostParam(w http.ResponseWriter, r *http.Request, p *principal) (string, bool) {
	v := pathValue(r, "vhost")
	if !s.b.HasVHost(v) {
		notFound(w)
		return "", false
	}
	if !s.canSeeVHost(p, v) {
		writeError(w, http.StatusUnauthorized, "not_authorised", "Access refused.")
		return "", false
	}
	return v, true
}

// optionalVHost is vhostParam for list endpoints that take an optional
// {vhost}: "" (every vhost) when the path has none.
func (s *Server) optionalVHost(w http.ResponseWriter, r *http.Request, p *principal) (string, bool) {
	if pathValue(r, "vhost") == "" {
		return "", true
	}
	return s.vhostParam(w, r, p)
}

// writeVisible answers a list request with the objects of the vhosts p may
// see, or with err.
func writeVisible[T any](s *Server, w http.ResponseWriter, r *http.Request, p *principal, objs []T, err error, vhostOf func(T) string, toJSON func(T) item) {
	if err != nil {
		s.brokerError(w, err)
		return
	}
	visible := s.visibleVHosts(p)
	items := make([]item, 0, len(objs))
	for _, o := range objs {
		if visible(vhostOf(o)) {
			items = append(items, toJSON(o))
		}
	}
	writeList(w, r, items)
}

// canSeeVHost reports whether p may see objects of vhost v.
func (s *Server) canSeeVHost(p *principal, v string) bool {
	if p.monitor() {
		return true
	}
	return slices.Contains(s.b.UserVHosts(p.name), v)
}

// visibleVHosts returns a filter for objects of vhosts p may see.
func (s *Server) visibleVHosts(p *principal) func(string) bool {
	if p.monitor() {
		return func(string) bool { return true }
	}
	vs := s.b.UserVHosts(p.name)
	return func(v string) bool { return slices.Contains(vs, v) }
}

// actingUser is the broker user whose permissions a management operation
// is checked against: administrators act with full permissions, as the
// broker itself.
func actingUser(p *principal) string {
	if p.admin() {
		return ""
	}
	return p.name
}

// nodeName is the node name reported everywhere.
func nodeName() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return "warren@" + strings.Split(host, ".")[0]
}
