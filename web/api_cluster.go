package web

import (
	"context"
	"net/http"
	"time"

	"github.com/warrenmq/warren/broker"
)

// The cluster in the management API: /api/nodes lists every node of the
// cluster (RabbitMQ's shape, plus "metadata_leader"), and /api/cluster/...
// serves `warren ctl cluster_status`, `join_cluster`, `leave` and
// `forget_cluster_node` on the node asked.

// clusterTimeout bounds a node's answer to a status request.
const clusterTimeout = 2 * time.Second

// selfName is this node's name: its cluster name, or warren@<host>.
func (s *Server) selfName() string {
	if v := s.b.Cluster(); v != nil {
		return v.NodeName()
	}
	return nodeName()
}

// clusterNodeItems returns the /api/nodes items of a clustered node: this
// node in full, the others as far as they answered.
func (s *Server) clusterNodeItems(r *http.Request, rs ranges, v broker.ClusterView) ([]item, error) {
	ctx, cancel := context.WithTimeout(r.Context(), clusterTimeout)
	defer cancel()
	nodes, err := v.ClusterNodes(ctx)
	if err != nil {
		return nil, err
	}
	items := make([]item, 0, len(nodes))
	for _, n := range nodes {
		var it item
		if n.Name == v.NodeName() {
			it = s.nodeJSON(rs)
			// A node that could not install the cluster's definitions
			// snapshot is behind the cluster (the cluster retries).
			if msg := s.b.DefinitionsBehind(); msg != "" {
				it["definitions_behind"] = true
				it["definitions_error"] = msg
			} else {
				it["definitions_behind"] = false
			}
		} else {
			it = item{"type": "disc", "uptime": n.Uptime, "mem_used": n.MemUsed}
		}
		it["name"] = n.Name
		it["running"] = n.Running
		it["partitions"] = n.Partitions
		it["metadata_leader"] = n.MetadataLeader
		it["cluster_addr"] = n.Addr
		items = append(items, it)
	}
	return items, nil
}

func (s *Server) getClusterStatus(w http.ResponseWriter, r *http.Request, p *principal) {
	v := s.b.Cluster()
	if v == nil {
		writeJSON(w, http.StatusOK, item{"cluster_name": s.clusterName(), "nodes": []item{{
			"name": nodeName(), "running": true, "metadata_leader": true, "partitions": []string{}}}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), clusterTimeout)
	defer cancel()
	nodes, err := v.ClusterNodes(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "cluster_unavailable", err.Error())
		return
	}
	items := make([]item, 0, len(nodes))
	for _, n := range nodes {
		items = append(items, item{"name": n.Name, "cluster_addr": n.Addr, "running": n.Running,
			"metadata_leader": n.MetadataLeader, "uptime": n.Uptime, "mem_used": n.MemUsed, "partitions": n.Partitions})
	}
	writeJSON(w, http.StatusOK, item{"cluster_name": s.clusterName(), "node": v.NodeName(), "nodes": items})
}

// membership is the node's ClusterMembership, or an error answered.
func (s *Server) membership(w http.ResponseWriter) broker.ClusterMembership {
	if m, ok := s.b.Cluster().(broker.ClusterMembership); ok {
		return m
	}
	badRequest(w, "this node is not clustered: start it with --cluster-secret-file")
	return nil
}

func (s *Server) postClusterJoin(w http.ResponseWriter, r *http.Request, p *principal) {
	m := s.membership(w)
	if m == nil {
		return
	}
	var body struct {
		Node string `json:"node"`
	}
	if err := decodeBody(r, &body, 1<<16); err != nil || body.Node == "" {
		badRequest(w, `want {"node": "<cluster address of a node of the cluster>"}`)
		return
	}
	if err := m.JoinCluster(r.Context(), body.Node); err != nil {
		writeError(w, http.StatusServiceUnavailable, "join_failed", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) postClusterLeave(w http.ResponseWriter, r *http.Request, p *principal) {
	m := s.membership(w)
	if m == nil {
		return
	}
	if err := m.LeaveCluster(r.Context(), ""); err != nil {
		writeError(w, http.StatusServiceUnavailable, "leave_failed", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) deleteClusterNode(w http.ResponseWriter, r *http.Request, p *principal) {
	m := s.membership(w)
	if m == nil {
		return
	}
	if err := m.LeaveCluster(r.Context(), pathValue(r, "node")); err != nil {
		writeError(w, http.StatusServiceUnavailable, "forget_failed", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
