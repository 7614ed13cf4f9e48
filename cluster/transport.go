package cluster

import (
	"encoding/binary"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// Transport returns the Raft transport of group on this node: Raft's
// NetworkTransport over a StreamLayer whose connections are streams of the
// node's peer sessions tagged with the group (transport choice in doc.go).
// The node must be started. Closing the transport frees the group.
func (n *Node) Transport(group uint64) (*raft.NetworkTransport, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	if n.groups[group] != nil {
		n.mu.Unlock()
		return nil, ErrGroupTaken
	}
	l := &streamLayer{n: n, group: group, conns: make(chan net.Conn), done: make(chan struct{})}
	n.groups[group] = l
	n.mu.Unlock()
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  l,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:   "raft-transport",
			Level:  hclog.Warn,
			Output: zapWriter{n.log.With(zap.Uint64("group", group))},
		}),
	}), nil
}

// streamLayer is raft.StreamLayer for one group: Dial opens a stream tagged
// with the group on the session to the target node; Accept returns the
// streams peers opened for the group (handed over by Node.serveStream).
type streamLayer struct {
	n     *Node
	group uint64
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func (l *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, ErrClosed
	case <-l.n.done:
		return nil, ErrClosed
	}
}

func (l *streamLayer) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.groups[l.group] == l {
			delete(l.n.groups, l.group)
		}
		l.n.mu.Unlock()
	})
	return nil
}

func (l *streamLayer) Addr() net.Addr { return clusterAddr(l.n.advertise) }

func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	h := make([]byte, 1, 9)
	h[0] = streamRaft
	return l.n.openStream(string(address), timeout, binary.BigEndian.AppendUint64(h, l.group))
}

// clusterAddr is a node's advertised address as a net.Addr.
type clusterAddr string

func (clusterAddr) Network() string  { return "tcp" }
func (a clusterAddr) String() string { return string(a) }
