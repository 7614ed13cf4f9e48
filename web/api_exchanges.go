package web

import (
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/warrenmq/warren/broker"
)

// Exchanges: GET /api/exchanges[/vhost[/name]], PUT, DELETE (if-unused),
// POST .../publish, GET .../bindings/source|destination. The default
// exchange is "amq.default" in paths.

// exchangeParam is the {name} path value with amq.default mapped to "".
func exchangeParam(r *http.Request) string {
	n := pathValue(r, "name")
	if n == "amq.default" {
		return ""
	}
	return n
}

func (s *Server) getExchanges(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.optionalVHost(w, r, p)
	if !ok {
		return
	}
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	xs, err := s.b.Exchanges(vhost)
	writeVisible(s, w, r, p, xs, err, func(x broker.ExchangeInfo) string { return x.VHost }, func(x broker.ExchangeInfo) item { return s.exchangeJSON(x, rs) })
}

func (s *Server) getExchange(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	x, err := s.b.Exchange(vhost, exchangeParam(r))
	if err != nil {
		s.brokerError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.exchangeJSON(x, rs))
}

func (s *Server) putExchange(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	kind, _ := body["type"].(string)
	if kind == "" {
		kind = "direct" // as RabbitMQ declares an exchange given no type
	}
	args, err := tableFromJSON(body["arguments"])
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	name := exchangeParam(r)
	_, lookupErr := s.b.Exchange(vhost, name)
	durable := true
	if _, set := body["durable"]; set {
		durable = boolField(body, "durable")
	}
	err = s.b.DeclareExchange(vhost, actingUser(p), broker.ExchangeSpec{
		Name: name, Type: kind, Durable: durable, AutoDelete: boolField(body, "auto_delete"),
		Internal: boolField(body, "internal"), Arguments: args,
	})
	if err != nil {
		s.brokerError(w, err)
		return
	}
	if lookupErr == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) deleteExchange(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	err := s.b.DeleteExchange(vhost, actingUser(p), exchangeParam(r), r.URL.Query().Get("if-unused") == "true")
	if err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// publish is POST /api/exchanges/vhost/name/publish: properties,
// routing_key, payload, payload_encoding (string or base64).
func (s *Server) publish(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	// As RabbitMQ: every key is required, the missing ones are named.
	var missing []string
	for _, k := range [...]string{"routing_key", "properties", "payload", "payload_encoding"} {
		if _, ok := body[k]; !ok {
			missing = append(missing, "{key_missing,"+k+"}")
		}
	}
	if missing != nil {
		badRequest(w, "["+strings.Join(missing, ",")+"]")
		return
	}
	key, _ := body["routing_key"].(string)
	payload, _ := body["payload"].(string)
	var data []byte
	switch enc, _ := body["payload_encoding"].(string); enc {
	case "string":
		data = []byte(payload)
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(payload); err != nil {
			badRequest(w, "payload is not valid base64")
			return
		}
	default:
		badRequest(w, "payload_encoding must be string or base64")
		return
	}
	props := map[string]any{}
	if pm, ok := body["properties"].(map[string]any); ok {
		props = pm
	}
	pp, err := propertiesFromJSON(props)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	routed, err := s.b.Publish(vhost, actingUser(p), exchangeParam(r), key, pp, data)
	if err != nil {
		s.brokerError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"routed": routed})
}

func (s *Server) getExchangeBindingsSource(w http.ResponseWriter, r *http.Request, p *principal) {
	s.exchangeBindings(w, r, p, true)
}

func (s *Server) getExchangeBindingsDestination(w http.ResponseWriter, r *http.Request, p *principal) {
	s.exchangeBindings(w, r, p, false)
}

func (s *Server) exchangeBindings(w http.ResponseWriter, r *http.Request, p *principal, source bool) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	name := exchangeParam(r)
	if _, err := s.b.Exchange(vhost, name); err != nil {
		s.brokerError(w, err)
		return
	}
	s.writeBindings(w, r, vhost, func(b broker.BindingInfo) bool {
		if source {
			return b.Source == name
		}
		return b.DestinationIsExchange && b.Destination == name
	})
}
