package cluster

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// BrokerLink is the broker's node link (broker.Config.Link) over a Node:
// it dials a peer's broker by node name, over an 'L' stream of the
// session to that peer. The broker owns what the stream carries (its
// framing is described in this package's doc); the node supplies
// authenticated, multiplexed streams, and the peer's Node hands them to
// its broker (Node.HandleLink with Broker.ServeLink).
type BrokerLink struct {
	n *Node

	mu    sync.Mutex
	addrs map[string]string // node name → cluster address
	// group, when set (Follow), is the metadata group whose configuration
	// names the cluster's nodes and their addresses.
	group *RaftLog
}

// NewBrokerLink returns the link of node n; SetPeer tells it where its
// peers are.
func NewBrokerLink(n *Node) *BrokerLink {
	return &BrokerLink{n: n, addrs: make(map[string]string)}
}

// SetPeer records the cluster address of the node named name (membership
// keeps it up to date).
func (l *BrokerLink) SetPeer(name, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs[name] = addr
}

// Follow makes the link take the cluster's nodes and their addresses from
// the metadata group's configuration (joins, leaves and restarts included),
// read at each Nodes and Dial; addresses given with SetPeer fill in for
// nodes the configuration does not name.
func (l *BrokerLink) Follow(g *RaftLog) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.group = g
}

// peers is the node name → cluster address map: the SetPeer addresses
// overlaid with the followed group's members. No lock held.
func (l *BrokerLink) peers() map[string]string {
	l.mu.Lock()
	out := make(map[string]string, len(l.addrs)+3)
	for name, addr := range l.addrs {
		out[name] = addr
	}
	g := l.group
	l.mu.Unlock()
	if g != nil {
		for name, addr := range g.Members() {
			out[name] = addr
		}
	}
	return out
}

// Nodes lists the cluster's nodes: this one and its peers.
func (l *BrokerLink) Nodes() []string {
	out := []string{l.n.Name()}
	for name := range l.peers() {
		if name != l.n.Name() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Dial opens a link stream to the broker of the node named node.
func (l *BrokerLink) Dial(node string, timeout time.Duration) (net.Conn, error) {
	addr, ok := l.peers()[node]
	if !ok {
		return nil, fmt.Errorf("cluster: no address for node %q", node)
	}
	return l.n.DialLink(addr, timeout)
}
