package web

import (
	"net/http"
	"net/url"

	"github.com/warrenmq/warren/broker"
)

// Bindings: GET /api/bindings[/vhost], and between an exchange and a
// queue (/e/{source}/q/{dest}) or exchange (/e/{source}/e/{dest}): GET
// the list, POST to bind (201 with Location), GET or DELETE one by its
// properties key.

// writeBindings lists the bindings of vhost ("" = every visible one)
// that keep selects.
func (s *Server) writeBindings(w http.ResponseWriter, r *http.Request, vhost string, keep func(broker.BindingInfo) bool) {
	bs, err := s.b.Bindings(vhost)
	if err != nil {
		s.brokerError(w, err)
		return
	}
	items := make([]item, 0, len(bs))
	for _, b := range bs {
		if keep(b) {
			items = append(items, bindingJSON(b))
		}
	}
	writeList(w, r, items)
}

func (s *Server) getBindings(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.optionalVHost(w, r, p)
	if !ok {
		return
	}
	visible := s.visibleVHosts(p)
	s.writeBindings(w, r, vhost, func(b broker.BindingInfo) bool { return visible(b.VHost) })
}

// bindingEnds reads source, destination and the destination kind of a
// binding path, answering 404 when either end does not exist.
func (s *Server) bindingEnds(w http.ResponseWriter, r *http.Request, p *principal, toExchange bool) (vhost, source, dest string, ok bool) {
	vhost, ok = s.vhostParam(w, r, p)
	if !ok {
		return
	}
	source, dest = pathValue(r, "source"), pathValue(r, "dest")
	if source == "amq.default" {
		source = ""
	}
	if _, err := s.b.Exchange(vhost, source); err != nil {
		notFound(w)
		return vhost, source, dest, false
	}
	var err error
	if toExchange {
		_, err = s.b.Exchange(vhost, dest)
	} else {
		_, err = s.b.Queue(vhost, dest)
	}
	if err != nil {
		notFound(w)
		return vhost, source, dest, false
	}
	return vhost, source, dest, true
}

func between(source, dest string, toExchange bool) func(broker.BindingInfo) bool {
	return func(b broker.BindingInfo) bool {
		return b.Source == source && b.Destination == dest && b.DestinationIsExchange == toExchange
	}
}

func (s *Server) getBindingsBetween(toExchange bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		vhost, source, dest, ok := s.bindingEnds(w, r, p, toExchange)
		if !ok {
			return
		}
		s.writeBindings(w, r, vhost, between(source, dest, toExchange))
	}
}

func (s *Server) postBinding(toExchange bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		s.bind(w, r, p, toExchange)
	}
}

func (s *Server) bind(w http.ResponseWriter, r *http.Request, p *principal, toExchange bool) {
	vhost, source, dest, ok := s.bindingEnds(w, r, p, toExchange)
	if !ok {
		return
	}
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	key, _ := body["routing_key"].(string)
	args, err := tableFromJSON(body["arguments"])
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	if err := s.b.Bind(vhost, actingUser(p), source, dest, toExchange, key, args, true); err != nil {
		s.brokerError(w, err)
		return
	}
	w.Header().Set("Location", url.PathEscape(propertiesKey(key, args)))
	w.WriteHeader(http.StatusCreated)
}

// findBinding returns the binding between the path's ends with the path's
// properties key.
func (s *Server) findBinding(w http.ResponseWriter, r *http.Request, p *principal, toExchange bool) (broker.BindingInfo, bool) {
	vhost, source, dest, ok := s.bindingEnds(w, r, p, toExchange)
	if !ok {
		return broker.BindingInfo{}, false
	}
	bs, err := s.b.Bindings(vhost)
	if err != nil {
		s.brokerError(w, err)
		return broker.BindingInfo{}, false
	}
	props := pathValue(r, "props")
	match := between(source, dest, toExchange)
	for _, b := range bs {
		if match(b) && propertiesKey(b.RoutingKey, b.Arguments) == props {
			return b, true
		}
	}
	notFound(w)
	return broker.BindingInfo{}, false
}

func (s *Server) getBinding(toExchange bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		if b, ok := s.findBinding(w, r, p, toExchange); ok {
			writeJSON(w, http.StatusOK, bindingJSON(b))
		}
	}
}

func (s *Server) deleteBinding(toExchange bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		s.unbind(w, r, p, toExchange)
	}
}

func (s *Server) unbind(w http.ResponseWriter, r *http.Request, p *principal, toExchange bool) {
	b, ok := s.findBinding(w, r, p, toExchange)
	if !ok {
		return
	}
	if b.Source == "" {
		writeError(w, http.StatusUnauthorized, "not_authorised", "operation not permitted on the default exchange")
		return
	}
	if err := s.b.Bind(b.VHost, actingUser(p), b.Source, b.Destination, b.DestinationIsExchange, b.RoutingKey, b.Arguments, false); err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
