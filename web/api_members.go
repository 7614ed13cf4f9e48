package web

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/warrenmq/warren/broker"
)

// Membership of replicated queues (Warren's API for RabbitMQ's
// rabbitmq-queues add_member / delete_member / grow / shrink / rebalance and
// rabbitmq-streams add_replica / delete_replica, which have no HTTP API in
// RabbitMQ): a quorum queue or stream is replicated in a data group shared
// with other queues, so a change of its members is a change of its group's
// members, and of every queue's in that group (the answer names the group
// and its members).
//
//	POST   /api/queues/{vhost}/{name}/members          {"node": "n"}  add_member
//	DELETE /api/queues/{vhost}/{name}/members/{node}                  delete_member
//	POST   /api/queues/{vhost}/{name}/replicas         {"node": "n"}  add_replica
//	DELETE /api/queues/{vhost}/{name}/replicas/{node}                 delete_replica
//	POST   /api/quorum-groups/grow                     {"node": "n"}  grow
//	POST   /api/quorum-groups/shrink                   {"node": "n"}  shrink
//	POST   /api/quorum-groups/rebalance                               rebalance
func (s *Server) memberRoutes(h func(pattern string, l level, f handlerFunc)) {
	h("POST /api/queues/{vhost}/{name}/members", levelAdmin, s.memberChange(true, false))
	h("DELETE /api/queues/{vhost}/{name}/members/{node}", levelAdmin, s.memberChange(false, false))
	h("POST /api/queues/{vhost}/{name}/replicas", levelAdmin, s.memberChange(true, true))
	h("DELETE /api/queues/{vhost}/{name}/replicas/{node}", levelAdmin, s.memberChange(false, true))
	h("POST /api/quorum-groups/grow", levelAdmin, s.groupsChange(true))
	h("POST /api/quorum-groups/shrink", levelAdmin, s.groupsChange(false))
	h("POST /api/quorum-groups/rebalance", levelAdmin, s.rebalance)
}

// rebalanceWait bounds how long a rebalance waits for the groups'
// leaderships to go back to their preferred members.
const rebalanceWait = 10 * time.Second

// rebalance answers the data groups' leaders once every group holding
// queues is led by its preferred member, if it is up (rabbitmq-queues
// rebalance; the leaderships go back on their own, see
// broker.RebalanceQuorumLeaders).
func (s *Server) rebalance(w http.ResponseWriter, r *http.Request, p *principal) {
	gls, err := s.b.RebalanceQuorumLeaders(r.Context(), rebalanceWait)
	if err != nil {
		s.memberError(w, err)
		return
	}
	if gls == nil {
		gls = []broker.GroupLeader{}
	}
	writeJSON(w, http.StatusOK, gls)
}

// memberNode is the node a membership request names: the path's, or the
// body's {"node": ...}.
func memberNode(w http.ResponseWriter, r *http.Request) (string, bool) {
	if n := pathValue(r, "node"); n != "" {
		return n, true
	}
	var body struct {
		Node string `json:"node"`
	}
	if err := decodeBody(r, &body, 1<<16); err != nil || body.Node == "" {
		badRequest(w, `want {"node": "<node name>"}`)
		return "", false
	}
	return body.Node, true
}

func (s *Server) memberChange(add, stream bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		vhost, ok := s.vhostParam(w, r, p)
		if !ok {
			return
		}
		node, ok := memberNode(w, r)
		if !ok {
			return
		}
		mc, err := s.b.ChangeQueueMember(vhost, pathValue(r, "name"), node, add, stream)
		if err != nil {
			s.memberError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, mc)
	}
}

func (s *Server) groupsChange(add bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p *principal) {
		node, ok := memberNode(w, r)
		if !ok {
			return
		}
		mcs, err := s.b.ChangeAllGroupsMember(node, add)
		if err != nil {
			s.memberError(w, err)
			return
		}
		if mcs == nil {
			mcs = []broker.MemberChange{}
		}
		writeJSON(w, http.StatusOK, mcs)
	}
}

// memberError answers a membership change that failed: 404 with the
// reason for an unknown queue, 400 for a queue of the wrong kind or a
// change refused.
func (s *Server) memberError(w http.ResponseWriter, err error) {
	if errors.Is(err, broker.ErrNotFound) {
		writeError(w, http.StatusNotFound, "not_found", err.Error())
		return
	}
	if errors.Is(err, broker.ErrInvalid) {
		badRequest(w, strings.TrimSuffix(err.Error(), ": "+broker.ErrInvalid.Error()))
		return
	}
	s.brokerError(w, err)
}
