package web

import (
	"errors"
	"net/http"
	"slices"

	"github.com/warrenmq/warren/broker"
)

// Topic permissions, as RabbitMQ's management API serves them:
// GET /api/topic-permissions, GET/PUT/DELETE
// /api/topic-permissions/{vhost}/{user} (a list: one entry per topic
// exchange; PUT sets one exchange's, DELETE clears them all), and the
// lists /api/users/{user}/topic-permissions and
// /api/vhosts/{vhost}/topic-permissions. Administrators only.

func topicPermissionJSON(tp broker.TopicPermissionInfo) item {
	return item{"user": tp.User, "vhost": tp.VHost, "exchange": tp.Exchange, "write": tp.Write, "read": tp.Read}
}

func (s *Server) topicPermissionItems(keep func(broker.TopicPermissionInfo) bool) []item {
	items := []item{}
	for _, tp := range s.b.TopicPermissions() {
		if keep(tp) {
			items = append(items, topicPermissionJSON(tp))
		}
	}
	return items
}

func (s *Server) getTopicPermissions(w http.ResponseWriter, r *http.Request, p *principal) {
	writeList(w, r, s.topicPermissionItems(func(broker.TopicPermissionInfo) bool { return true }))
}

func (s *Server) getUserTopicPermissions(w http.ResponseWriter, r *http.Request, p *principal) {
	user := pathValue(r, "user")
	if _, ok := s.findUser(user); !ok {
		notFound(w)
		return
	}
	writeList(w, r, s.topicPermissionItems(func(tp broker.TopicPermissionInfo) bool { return tp.User == user }))
}

func (s *Server) getVHostTopicPermissions(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, ok := s.vhostParam(w, r, p)
	if !ok {
		return
	}
	writeList(w, r, s.topicPermissionItems(func(tp broker.TopicPermissionInfo) bool { return tp.VHost == vhost }))
}

// getTopicPermission lists a user's topic permissions in a vhost: 404
// when there are none.
func (s *Server) getTopicPermission(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, user := pathValue(r, "vhost"), pathValue(r, "user")
	items := s.topicPermissionItems(func(tp broker.TopicPermissionInfo) bool { return tp.User == user && tp.VHost == vhost })
	if len(items) == 0 {
		notFound(w)
		return
	}
	writeJSON(w, http.StatusOK, items)
}

// putTopicPermission sets the user's permission on the body's exchange:
// 201 when new, 204 when replaced.
func (s *Server) putTopicPermission(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, user := pathValue(r, "vhost"), pathValue(r, "user")
	var body map[string]any
	if err := decodeBody(r, &body, maxBody); err != nil {
		badRequest(w, err.Error())
		return
	}
	ex, ok := body["exchange"].(string)
	if !ok {
		badRequest(w, "[{key_missing,exchange}]")
		return
	}
	str := func(k string) string { v, _ := body[k].(string); return v }
	existed := slices.ContainsFunc(s.b.TopicPermissions(), func(tp broker.TopicPermissionInfo) bool {
		return tp.User == user && tp.VHost == vhost && tp.Exchange == ex
	})
	if err := s.b.SetTopicPermissions(user, vhost, ex, str("write"), str("read")); err != nil {
		if errors.Is(err, broker.ErrNotFound) {
			badRequest(w, "vhost_or_user_not_found")
			return
		}
		badRequest(w, err.Error())
		return
	}
	if existed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// deleteTopicPermission clears the user's topic permissions in the vhost.
func (s *Server) deleteTopicPermission(w http.ResponseWriter, r *http.Request, p *principal) {
	vhost, user := pathValue(r, "vhost"), pathValue(r, "user")
	found := false
	for _, tp := range s.b.TopicPermissions() {
		if tp.User != user || tp.VHost != vhost {
			continue
		}
		found = true
		if err := s.b.ClearTopicPermissions(user, vhost, tp.Exchange); err != nil && !errors.Is(err, broker.ErrNotFound) {
			s.brokerError(w, err)
			return
		}
	}
	if !found {
		notFound(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
