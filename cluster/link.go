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

// Nodes lists the cluster's nodes: this one and the peers set.
func (l *BrokerLink) Nodes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := []string{l.n.Name()}
	for name := range l.addrs {
		if name != l.n.Name() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Dial opens a link stream to the broker of the node named node.
func (l *BrokerLink) Dial(node string, timeout time.Duration) (net.Conn, error) {
	l.mu.Lock()
	addr, ok := l.addrs[node]
	l.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("cluster: no address for node %q", node)
	}
	return l.n.DialLink(addr, timeout)
}
