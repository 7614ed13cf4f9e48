package web

import (
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"slices"

	"github.com/warrenmq/warren/broker"
)

// Administration: vhosts, users, permissions.

func osPID() int { return os.Getpid() }

func (s *Server) vhostJSON(name string, rs ranges, vstats map[string]broker.VHostStats) item {
	qs, _ := s.b.Queues(name)
	vals := vhostValues(qs, vstats[name])
	v := s.rates.view(vhostKey(name), rs)
	it := item{
		"name":               name,
		"description":        "",
		"tags":               []string{},
		"metadata":           item{"description": "", "tags": []string{}},
		"default_queue_type": "classic",
		"tracing":            false,
		"cluster_state":      item{nodeName(): "running"},
		"message_stats":      messageStats(v, vals, channelMsgFields),
	}
	statsInto(it, v, vals, lengthFields, classLengths)
	return statsInto(it, v, vals, octetFields, classData)
}

func (s *Server) getVHosts(w http.ResponseWriter, r *http.Request, p *principal) {
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	visible := s.visibleVHosts(p)
	vstats := s.b.VHostStats()
	var items []item
	for _, v := range s.b.VHosts() {
		if visible(v.Name) {
			items = append(items, s.vhostJSON(v.Name, rs, vstats))
		}
	}
	writeList(w, r, items)
}

func (s *Server) getVHost(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	rs, ok := requestRanges(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, s.vhostJSON(vhost, rs, s.b.VHostStats()))
}

func (s *Server) putVHost(w http.ResponseWriter, r *http.Request, p *principal) {
	name := pathValue(r, "vhost")
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	err := s.b.AddVHost(name)
	switch {
	case errors.Is(err, broker.ErrExists):
		w.WriteHeader(http.StatusNoContent)
	case err != nil:
		s.brokerError(w, err)
	default:
		w.WriteHeader(http.StatusCreated)
	}
}

func (s *Server) deleteVHost(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := s.b.DeleteVHost(pathValue(r, "vhost")); err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func userJSON(u broker.UserInfo) item {
	tags := u.Tags
	if tags == nil {
		tags = []string{}
	}
	limits := map[string]int64{}
	if u.Limits != nil {
		limits = u.Limits
	}
	return item{
		"name":              u.Name,
		"password_hash":     base64.StdEncoding.EncodeToString(u.PasswordHash),
		"hashing_algorithm": u.HashAlgorithm,
		"tags":              tags,
		"limits":            limits,
	}
}

func (s *Server) findUser(name string) (broker.UserInfo, bool) {
	for _, u := range s.b.Users() {
		if u.Name == name {
			return u, true
		}
	}
	return broker.UserInfo{}, false
}

func (s *Server) getUsers(w http.ResponseWriter, r *http.Request, p *principal) {
	var items []item
	for _, u := range s.b.Users() {
		items = append(items, userJSON(u))
	}
	writeList(w, r, items)
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request, p *principal) {
	u, ok := s.findUser(pathValue(r, "user"))
	if !ok {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, userJSON(u))
}

// putUser creates or updates a user: password, or password_hash (base64,
// "" or absent for no password login) with hashing_algorithm; tags as a
// list or a comma-separated string.
func (s *Server) putUser(w http.ResponseWriter, r *http.Request, p *principal) {
	name := pathValue(r, "user")
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	if _, ok := body["tags"]; !ok {
		// As RabbitMQ: tags are required (an empty string or list for
		// none), or the older boolean "administrator" in their place.
		adm, ok := body["administrator"]
		if !ok {
			badRequest(w, "tags_not_present")
			return
		}
		body["tags"] = ""
		if b, _ := adm.(bool); b || adm == "true" {
			body["tags"] = "administrator"
		}
	}
	_, existed := s.findUser(name)
	if err := s.applyUser(name, body); err != nil {
		s.brokerError(w, err)
		return
	}
	if existed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// applyUser creates or updates a user from a users endpoint or
// definitions object.
func (s *Server) applyUser(name string, body map[string]any) error {
	tags := tagsFromJSON(body["tags"])
	limits, err := limitsFromJSON(body["limits"])
	if err != nil {
		return err
	}
	if pw, ok := body["password"].(string); ok {
		err = s.b.PutUser(name, pw, tags)
	} else {
		// Neither password nor password_hash: as in RabbitMQ, a user who
		// cannot log in with a password (EXTERNAL, with a client
		// certificate, can), or an existing user's password cleared.
		hashStr, _ := body["password_hash"].(string)
		hash, derr := base64.StdEncoding.DecodeString(hashStr)
		if derr != nil {
			return errors.New("password_hash is not valid base64")
		}
		alg, _ := body["hashing_algorithm"].(string)
		err = s.b.PutUserHash(name, hash, alg, tags)
	}
	// A user's "limits" (definitions files, as RabbitMQ exports them) are
	// set with it.
	if err == nil && len(limits) > 0 {
		err = s.b.SetUserLimits(name, limits)
	}
	return err
}

func (s *Server) deleteUser(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := s.b.DeleteUser(pathValue(r, "user")); err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func permissionJSON(pi broker.PermissionInfo) item {
	return item{"user": pi.User, "vhost": pi.VHost, "configure": pi.Configure, "write": pi.Write, "read": pi.Read}
}

func (s *Server) writePermissions(w http.ResponseWriter, r *http.Request, keep func(broker.PermissionInfo) bool) {
	var items []item
	for _, pi := range s.b.Permissions() {
		if keep(pi) {
			items = append(items, permissionJSON(pi))
		}
	}
	writeList(w, r, items)
}

func (s *Server) getPermissions(w http.ResponseWriter, r *http.Request, p *principal) {
	s.writePermissions(w, r, func(broker.PermissionInfo) bool { return true })
}

func (s *Server) getVHostPermissions(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	s.writePermissions(w, r, func(pi broker.PermissionInfo) bool { return pi.VHost == vhost })
}

func (s *Server) getUserPermissions(w http.ResponseWriter, r *http.Request, p *principal) {
	user := pathValue(r, "user")
	if _, ok := s.findUser(user); !ok {
		notFound(w)
		return
	}
	s.writePermissions(w, r, func(pi broker.PermissionInfo) bool { return pi.User == user })
}

func (s *Server) getPermission(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, user := pathValue(r, "vhost"), pathValue(r, "user")
	i := slices.IndexFunc(s.b.Permissions(), func(pi broker.PermissionInfo) bool { return pi.User == user && pi.VHost == vhost })
	if i < 0 {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, permissionJSON(s.b.Permissions()[i]))
}

func (s *Server) putPermission(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, user := pathValue(r, "vhost"), pathValue(r, "user")
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	str := func(k string) string { v, _ := body[k].(string); return v }
	existed := slices.ContainsFunc(s.b.Permissions(), func(pi broker.PermissionInfo) bool { return pi.User == user && pi.VHost == vhost })
	if err := s.b.SetPermissions(user, vhost, str("configure"), str("write"), str("read")); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			badRequest(w, err.Error())
			return
		}
		s.brokerError(w, err)
		return
	}
	if existed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) deletePermission(w http.ResponseWriter, r *http.Request, p *principal) {
	if err := s.b.ClearPermissions(pathValue(r, "user"), pathValue(r, "vhost")); err != nil {
		s.brokerError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
