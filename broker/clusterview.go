package broker

import "context"

// ClusterView is what the broker and the management API know of the
// cluster a node is in (Config.Cluster; nil for a single node). The cluster
// package implements it; the broker never imports that package.
type ClusterView interface {
	// NodeName is this node's name in the cluster.
	NodeName() string
	// ClusterNodes lists the cluster's nodes, this one included, asking
	// each for its status (a node that does not answer is not running).
	ClusterNodes(ctx context.Context) ([]ClusterNode, error)
}

// ClusterMembership changes a cluster's members through one of its nodes:
// what `warren ctl join_cluster`, `leave` and `forget_cluster_node` ask the
// node they talk to. A ClusterView may implement it.
type ClusterMembership interface {
	// JoinCluster makes this node a member of the cluster of the node at
	// addr (a cluster address).
	JoinCluster(ctx context.Context, addr string) error
	// LeaveCluster takes this node out of its cluster, or, with name set,
	// the node named so (forget_cluster_node).
	LeaveCluster(ctx context.Context, name string) error
}

// ClusterNode is one node of the cluster as ClusterView reports it.
type ClusterNode struct {
	Name string
	// Addr is its cluster address.
	Addr    string
	Running bool
	// MetadataLeader is set on the node that leads the metadata group.
	MetadataLeader bool
	// Uptime (milliseconds) and MemUsed (bytes), when it answered.
	Uptime  int64
	MemUsed uint64
	// Partitions names the members it cannot reach (RabbitMQ's
	// "partitions" field of /api/nodes).
	Partitions []string
}

// Cluster is the cluster view the broker was given (nil: a single node).
func (b *Broker) Cluster() ClusterView { return b.cfg.Cluster }
