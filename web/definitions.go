package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Definitions: GET exports the broker's (or one vhost's) definitions in
// RabbitMQ's JSON format; POST imports such a file (JSON body, or a
// multipart form with a "file" field as the console uploads).

func (s *Server) getDefinitions(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost := pathValue(r, "vhost")
	if vhost != "" && !s.b.HasVHost(vhost) {
		notFound(w)
		return
	}
	defs, err := s.exportDefinitions(vhost)
	if err != nil {
		s.brokerError(w, err)
		return
	}
	if r.URL.Query().Get("download") != "" {
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", r.URL.Query().Get("download")))
	}
	writeJSON(w, http.StatusOK, defs)
}

// exportDefinitions builds the definitions document of the broker, or of
// one vhost (then without users, vhosts, permissions, and without the
// vhost field on objects, as RabbitMQ writes it).
func (s *Server) exportDefinitions(vhost string) (item, error) {
	whole := vhost == ""
	defs := item{
		"rabbit_version":    broker.RabbitMQVersion,
		"rabbitmq_version":  broker.RabbitMQVersion,
		"product_name":      "Warren",
		"product_version":   broker.Version,
		"parameters":        []item{},
		"policies":          []item{},
		"global_parameters": []item{},
	}
	withVHost := func(it item, v string) item {
		if whole {
			it["vhost"] = v
		}
		return it
	}
	if whole {
		users := []item{}
		for _, u := range s.b.Users() {
			users = append(users, userJSON(u))
		}
		vhosts := []item{}
		for _, v := range s.b.VHosts() {
			vhosts = append(vhosts, item{"name": v.Name, "description": "", "tags": []string{}, "metadata": item{"description": "", "tags": []string{}}})
		}
		perms := []item{}
		for _, pi := range s.b.Permissions() {
			perms = append(perms, permissionJSON(pi))
		}
		tperms := []item{}
		for _, tp := range s.b.TopicPermissions() {
			tperms = append(tperms, item{"user": tp.User, "vhost": tp.VHost, "exchange": tp.Exchange, "write": tp.Write, "read": tp.Read})
		}
		defs["users"], defs["vhosts"], defs["permissions"], defs["topic_permissions"] = users, vhosts, perms, tperms
		defs["global_parameters"] = s.globals.list()
	}
	// Policies, without operator policies (RabbitMQ leaves them out too).
	policies := []item{}
	for _, v := range s.b.VHosts() {
		if !whole && v.Name != vhost {
			continue
		}
		ps, _ := s.b.Policies(v.Name)
		for _, pi := range ps {
			if pi.Operator {
				continue
			}
			it := policyJSON(pi)
			if !whole {
				delete(it, "vhost")
			}
			policies = append(policies, it)
		}
	}
	defs["policies"] = policies
	params := s.vhostLimitsParameters(func(v string) bool { return whole || v == vhost })
	if !whole {
		for _, pm := range params {
			delete(pm, "vhost")
		}
	}
	defs["parameters"] = params
	qs, err := s.b.Queues(vhost)
	if err != nil {
		return nil, err
	}
	queues := []item{}
	for _, q := range qs {
		if q.Exclusive {
			continue
		}
		qt := "classic"
		if q.Stream != nil {
			qt = "stream"
		}
		queues = append(queues, withVHost(item{
			"name": q.Name, "durable": q.Durable, "auto_delete": q.AutoDelete, "type": qt,
			"arguments": amqp.TableJSON(q.Arguments),
		}, q.VHost))
	}
	xs, err := s.b.Exchanges(vhost)
	if err != nil {
		return nil, err
	}
	exchanges := []item{}
	for _, x := range xs {
		if x.Name == "" || strings.HasPrefix(x.Name, "amq.") {
			continue
		}
		exchanges = append(exchanges, withVHost(item{
			"name": x.Name, "type": x.Type, "durable": x.Durable, "auto_delete": x.AutoDelete,
			"internal": x.Internal, "arguments": amqp.TableJSON(x.Arguments),
		}, x.VHost))
	}
	bs, err := s.b.Bindings(vhost)
	if err != nil {
		return nil, err
	}
	bindings := []item{}
	for _, b := range bs {
		if b.Source == "" {
			continue
		}
		it := bindingJSON(b)
		delete(it, "properties_key")
		if !whole {
			delete(it, "vhost")
		}
		bindings = append(bindings, it)
	}
	defs["queues"], defs["exchanges"], defs["bindings"] = queues, exchanges, bindings
	return defs, nil
}

func (s *Server) postDefinitions(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost := pathValue(r, "vhost")
	if vhost != "" && !s.b.HasVHost(vhost) {
		notFound(w)
		return
	}
	var body io.Reader = io.LimitReader(r.Body, maxDefsBody)
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			badRequest(w, err.Error())
			return
		}
		f, _, err := r.FormFile("file")
		if err != nil {
			badRequest(w, "no file in the form")
			return
		}
		defer f.Close()
		body = io.LimitReader(f, maxDefsBody)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	var defs definitions
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&defs); err != nil {
		badRequest(w, fmt.Sprintf("malformed definitions: %v", err))
		return
	}
	if err := s.importDefinitions(&defs, vhost); err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// definitions is the part of a definitions file Warren imports.
type definitions struct {
	Users            []map[string]any `json:"users"`
	VHosts           []map[string]any `json:"vhosts"`
	Permissions      []map[string]any `json:"permissions"`
	TopicPermissions []map[string]any `json:"topic_permissions"`
	Queues           []map[string]any `json:"queues"`
	Exchanges        []map[string]any `json:"exchanges"`
	Bindings         []map[string]any `json:"bindings"`
	Policies         []map[string]any `json:"policies"`
	Parameters       []map[string]any `json:"parameters"`
	GlobalParameters []map[string]any `json:"global_parameters"`
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

// importDefinitions applies a definitions document: vhosts, users,
// permissions, topic permissions, global parameters, parameters, policies,
// exchanges, queues, then bindings. With vhost set every object goes to
// that vhost and users, vhosts, permissions and global parameters are
// ignored. Runtime parameters are refused, as by a RabbitMQ without the
// plugin of their component, except vhost-limits (the vhosts' limits). Existing equivalent objects are left alone; it
// stops at the first error.
func (s *Server) importDefinitions(d *definitions, vhost string) error {
	objVHost := func(m map[string]any) string {
		if vhost != "" {
			return vhost
		}
		if v := str(m, "vhost"); v != "" {
			return v
		}
		return "/"
	}
	if vhost == "" {
		for _, v := range d.VHosts {
			if err := s.b.AddVHost(str(v, "name")); err != nil && !errors.Is(err, broker.ErrExists) {
				return err
			}
		}
		for _, u := range d.Users {
			if err := s.applyUser(str(u, "name"), u); err != nil {
				return fmt.Errorf("user %q: %w", str(u, "name"), err)
			}
		}
		for _, pm := range d.Permissions {
			if err := s.b.SetPermissions(str(pm, "user"), objVHost(pm), str(pm, "configure"), str(pm, "write"), str(pm, "read")); err != nil {
				return err
			}
		}
		for _, tp := range d.TopicPermissions {
			if err := s.b.SetTopicPermissions(str(tp, "user"), objVHost(tp), str(tp, "exchange"), str(tp, "write"), str(tp, "read")); err != nil {
				return err
			}
		}
		for _, g := range d.GlobalParameters {
			if name := str(g, "name"); name != "" {
				if _, err := s.globals.set(name, g["value"]); err != nil {
					return err
				}
			}
		}
	}
	for _, pm := range d.Parameters {
		if str(pm, "component") != "vhost-limits" {
			return fmt.Errorf("parameter %q: %s", str(pm, "name"), parameterRefusal(str(pm, "component")))
		}
		if err := s.importVHostLimits(objVHost(pm), pm); err != nil {
			return err
		}
	}
	for _, pol := range d.Policies {
		if err := s.applyPolicy(objVHost(pol), str(pol, "name"), pol, false); err != nil {
			return fmt.Errorf("policy %q: %w", str(pol, "name"), err)
		}
	}
	for _, x := range d.Exchanges {
		args, err := tableFromJSON(x["arguments"])
		if err != nil {
			return err
		}
		if err := s.b.DeclareExchange(objVHost(x), "", broker.ExchangeSpec{
			Name: str(x, "name"), Type: str(x, "type"), Durable: boolField(x, "durable"),
			AutoDelete: boolField(x, "auto_delete"), Internal: boolField(x, "internal"), Arguments: args,
		}); err != nil {
			return err
		}
	}
	for _, q := range d.Queues {
		args, err := tableFromJSON(q["arguments"])
		if err != nil {
			return err
		}
		if t := str(q, "type"); t == "stream" || t == "quorum" {
			args = withQueueType(args, t)
		}
		if err := s.b.DeclareQueue(objVHost(q), "", broker.QueueSpec{
			Name: str(q, "name"), Durable: boolField(q, "durable"), AutoDelete: boolField(q, "auto_delete"), Arguments: args,
		}); err != nil {
			return err
		}
	}
	for _, b := range d.Bindings {
		args, err := tableFromJSON(b["arguments"])
		if err != nil {
			return err
		}
		if err := s.b.Bind(objVHost(b), "", str(b, "source"), str(b, "destination"),
			str(b, "destination_type") == "exchange", str(b, "routing_key"), args, true); err != nil {
			return err
		}
	}
	return nil
}
