package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
	"go.uber.org/zap"
)

// handshakeTimeout bounds a connection's handshake and a stream's header.
const handshakeTimeout = 10 * time.Second

// Stream kinds: the first byte a node writes on a stream it opens.
const (
	// streamRaft carries one Raft connection of group g: 'R' g(8).
	streamRaft = 'R'
	// streamLink carries the node-to-node broker link: 'L'.
	streamLink = 'L'
	// streamMeta carries one request of the metadata group (raftrpc.go):
	// a forwarded proposal, a join or removal, a node's status: 'M'.
	streamMeta = 'M'
	// streamGroupMeta carries the same requests for data group g:
	// 'G' g(8) (datagroup.go).
	streamGroupMeta = 'G'
)

var (
	// ErrClosed is returned by a closed Node (and its transports).
	ErrClosed = errors.New("cluster: node closed")
	// ErrGroupTaken is returned by Transport for a group that already has one.
	ErrGroupTaken = errors.New("cluster: group already has a transport on this node")
)

// LinkHandler serves one node-to-node broker link stream opened by the
// authenticated peer named peer. It owns conn and returns when done with it;
// the node closes the stream after it returns. It runs on its own goroutine,
// which Close waits for (Close closes the session first, so conn's reads fail).
type LinkHandler func(peer string, conn net.Conn)

// Node is one Warren node's cluster port: it accepts and dials authenticated
// connections, one per peer, and multiplexes the Raft groups' streams and the
// broker link over them. Start it, take transports, Close it.
type Node struct {
	cfg         Config
	log         *zap.Logger
	secret      []byte
	incarnation uint64
	advertise   string
	ln          net.Listener
	done        chan struct{}
	wg          sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	peers   map[string]*peer // by advertised address
	pending map[net.Conn]struct{}
	groups  map[uint64]*streamLayer
	link    LinkHandler
	meta    LinkHandler
	// groupMeta serves the requests of the data groups, by group.
	groupMeta map[uint64]LinkHandler
	// lost is told, for each group running here, the address of a peer
	// whose session ended (not replaced by a newer one): the group's
	// leader may be gone (RaftLog.peerLost).
	lost map[uint64]func(addr string)
	// refusals: when each refusal was last logged at Warn (refused)
	refusals map[string]time.Time
}

// peer is the session to one node, and the dial in progress to it.
type peer struct {
	sess    *session
	dialing chan struct{} // closed when the dial ends
}

// session is one authenticated, multiplexed connection to a peer.
type session struct {
	ys          *yamux.Session
	name        string // the peer's node name
	addr        string // the peer's advertised address
	incarnation uint64 // the peer's process incarnation
	dialer      string // the name of the node that dialed
}

// New returns a node for cfg; Start opens its port.
func New(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Node{
		cfg:      cfg,
		log:      cfg.Logger.With(zap.String("node", cfg.NodeName)),
		done:     make(chan struct{}),
		peers:    make(map[string]*peer),
		pending:  make(map[net.Conn]struct{}),
		groups:   make(map[uint64]*streamLayer),
		refusals: make(map[string]time.Time),
	}, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.NodeName }

// Addr is the node's advertised cluster address (valid after Start): its
// Raft server address in every group.
func (n *Node) Addr() string { return n.advertise }

// HandleLink registers the broker link handler; call it before Start.
// Without one, link streams are closed.
func (n *Node) HandleLink(h LinkHandler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.link = h
}

// Start reads the secret, listens on the cluster port and accepts peers.
func (n *Node) Start() error {
	secret, err := n.cfg.secret()
	if err != nil {
		return err
	}
	var inc [8]byte
	if _, err := rand.Read(inc[:]); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", n.cfg.ClusterAddr)
	if err != nil {
		return fmt.Errorf("cluster: listen: %w", err)
	}
	n.secret, n.incarnation, n.ln = secret, binary.BigEndian.Uint64(inc[:]), ln
	n.advertise = n.cfg.advertise(ln.Addr())
	if len(n.advertise) > maxField {
		ln.Close()
		return fmt.Errorf("cluster: advertised address over %d bytes", maxField)
	}
	n.log.Info("cluster port listening", zap.String("listen", ln.Addr().String()),
		zap.String("advertise", n.advertise), zap.String("cluster-id", n.cfg.ClusterID), zap.Bool("tls", n.cfg.TLS != nil))
	n.wg.Add(1)
	go n.acceptLoop()
	return nil
}

// Close closes the port, every session and transport stream, and waits for
// the node's goroutines.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	close(n.done)
	var sessions []*session
	for _, p := range n.peers {
		if p.sess != nil {
			sessions = append(sessions, p.sess)
		}
	}
	var pending []net.Conn
	for c := range n.pending {
		pending = append(pending, c)
	}
	n.mu.Unlock()
	if n.ln != nil {
		n.ln.Close()
	}
	for _, s := range sessions {
		s.ys.Close()
	}
	for _, c := range pending {
		c.Close()
	}
	n.wg.Wait()
	return nil
}

// Peers returns the names of the peers this node has a live session with.
func (n *Node) Peers() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var names []string
	for _, p := range n.peers {
		if p.sess != nil && !p.sess.ys.IsClosed() {
			names = append(names, p.sess.name)
		}
	}
	return names
}

// Connect makes sure this node has an authenticated session with the node
// at addr, dialing it if needed, and returns the peer's name.
func (n *Node) Connect(ctx context.Context, addr string) (string, error) {
	timeout := handshakeTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	s, err := n.session(addr, timeout)
	if err != nil {
		return "", err
	}
	return s.name, nil
}

// DialLink opens a broker link stream to the node at addr.
func (n *Node) DialLink(addr string, timeout time.Duration) (net.Conn, error) {
	return n.openStream(addr, timeout, []byte{streamLink})
}

func (n *Node) acceptLoop() {
	defer n.wg.Done()
	for {
		c, err := n.ln.Accept()
		if err != nil {
			select {
			case <-n.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			n.log.Error("cluster port accept failed", zap.Error(err))
			return
		}
		if !n.track(c) {
			c.Close()
			return
		}
		n.wg.Add(1)
		go n.serveConn(c)
	}
}

// track records a connection in its handshake so Close can close it.
func (n *Node) track(c net.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.pending[c] = struct{}{}
	return true
}

func (n *Node) untrack(c net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.pending, c)
}

// serveConn authenticates an accepted connection and serves its session.
func (n *Node) serveConn(raw net.Conn) {
	defer n.wg.Done()
	defer n.untrack(raw)
	remote := raw.RemoteAddr().String()
	var conn net.Conn = raw
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	if n.cfg.TLS != nil {
		cfg := n.cfg.TLS.Clone()
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		tc := tls.Server(raw, cfg)
		if err := tc.Handshake(); err != nil {
			n.log.Warn("refused cluster peer", zap.String("remote-addr", remote), zap.String("reason", "TLS: "+err.Error()))
			raw.Close()
			return
		}
		conn = tc
	}
	h, err := serverHandshake(n, conn)
	if err != nil {
		n.refused(remote, h.name, err)
		conn.Close()
		return
	}
	_ = raw.SetDeadline(time.Time{})
	ys, err := yamux.Server(newFrameConn(conn), n.yamuxConfig())
	if err != nil {
		conn.Close()
		return
	}
	s := &session{ys: ys, name: h.name, addr: h.advertise, incarnation: h.incarnation, dialer: h.name}
	if !n.install(s) {
		ys.Close()
		return
	}
	n.log.Info("cluster peer connected", zap.String("peer", h.name), zap.String("peer-addr", h.advertise), zap.String("dialer", h.name))
	n.untrack(raw)
	n.serveSession(s)
}

// refusalLogEvery is how often the same refusal (remote host, peer name and
// reason) is logged at Warn; repeats in between go to Debug, since Raft
// retries a refused peer many times a second.
const refusalLogEvery = time.Minute

// refused logs a handshake that failed, naming the peer and the reason.
func (n *Node) refused(remote, name string, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("connection closed during the handshake: %w", err)
	}
	host, _, _ := net.SplitHostPort(remote)
	key := host + "\x00" + name + "\x00" + err.Error()
	now := time.Now()
	n.mu.Lock()
	last, seen := n.refusals[key]
	warn := !seen || now.Sub(last) >= refusalLogEvery
	if warn {
		if len(n.refusals) >= 1024 {
			clear(n.refusals)
		}
		n.refusals[key] = now
	}
	n.mu.Unlock()
	lvl := zap.DebugLevel
	if warn {
		lvl = zap.WarnLevel
	}
	n.log.Log(lvl, "refused cluster peer", zap.String("remote-addr", remote), zap.String("peer", name), zap.String("reason", err.Error()))
}

// sessionTimeout bounds a keepalive ping's round trip (and a frame's
// write) on a peer's session.
const sessionTimeout = 10 * time.Second

// keepAliveInterval is how often each side pings a peer's session.
const keepAliveInterval = 3 * time.Second

func (n *Node) yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	// A peer that answers no ping for sessionTimeout is gone: its
	// session is closed (a partition is seen within seconds, and the
	// leaders of the data groups return what its consumers held). A
	// killed peer's session ends with its connection, without a ping;
	// pings every second were a fifth of an idle leader's frames.
	c.KeepAliveInterval = keepAliveInterval
	c.ConnectionWriteTimeout = sessionTimeout
	c.LogOutput = zapWriter{n.log.Named("yamux")}
	return c
}

// install makes s the session to its peer unless a session to that peer is
// already up and wins: a newer incarnation of the peer always wins (it
// restarted); otherwise, when both nodes dialed at once, the connection
// dialed by the node with the smaller name wins on both sides, so each pair
// ends with one connection.
func (n *Node) install(s *session) bool {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return false
	}
	p := n.peers[s.addr]
	if p == nil {
		p = &peer{}
		n.peers[s.addr] = p
	}
	old := p.sess
	if old != nil && !old.ys.IsClosed() && old.incarnation == s.incarnation && old.dialer != s.dialer &&
		s.dialer != min(n.cfg.NodeName, s.name) {
		n.mu.Unlock()
		return false
	}
	p.sess = s
	n.wg.Add(1) // serveSession's
	n.mu.Unlock()
	if old != nil {
		old.ys.Close()
	}
	return true
}

// session returns the session to the node at addr, dialing it if there is
// none; concurrent callers share one dial.
func (n *Node) session(addr string, timeout time.Duration) (*session, error) {
	if addr == n.advertise {
		return nil, fmt.Errorf("cluster: %s is this node's own address", addr)
	}
	deadline := time.Now().Add(timeout)
	for range 4 {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return nil, ErrClosed
		}
		p := n.peers[addr]
		if p == nil {
			p = &peer{}
			n.peers[addr] = p
		}
		if p.sess != nil && !p.sess.ys.IsClosed() {
			s := p.sess
			n.mu.Unlock()
			return s, nil
		}
		if ch := p.dialing; ch != nil {
			n.mu.Unlock()
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-ch:
				t.Stop()
				continue
			case <-t.C:
				return nil, fmt.Errorf("cluster: dial %s: timed out waiting for the connection", addr)
			case <-n.done:
				t.Stop()
				return nil, ErrClosed
			}
		}
		ch := make(chan struct{})
		p.dialing = ch
		n.mu.Unlock()
		err := n.dial(addr, time.Until(deadline))
		n.mu.Lock()
		p.dialing = nil
		close(ch)
		n.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("cluster: dial %s: no session came up", addr)
}

// dial connects to addr, authenticates, and installs the session.
func (n *Node) dial(addr string, timeout time.Duration) error {
	// Dial from the cluster port's address when it names one, so that
	// peers (and firewalls) see a node's connections come from its own
	// address.
	d := net.Dialer{Timeout: timeout}
	if host, _, err := net.SplitHostPort(n.cfg.ClusterAddr); err == nil {
		if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
			d.LocalAddr = &net.TCPAddr{IP: ip}
		}
	}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		return fmt.Errorf("cluster: dial %s: %w", addr, err)
	}
	if !n.track(raw) {
		raw.Close()
		return ErrClosed
	}
	defer n.untrack(raw)
	_ = raw.SetDeadline(time.Now().Add(handshakeTimeout))
	var conn net.Conn = raw
	if n.cfg.TLS != nil {
		cfg := n.cfg.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(raw, cfg)
		if err := tc.Handshake(); err != nil {
			raw.Close()
			n.log.Warn("refused cluster peer", zap.String("remote-addr", addr), zap.String("reason", "TLS: "+err.Error()))
			return fmt.Errorf("cluster: dial %s: TLS: %w", addr, err)
		}
		conn = tc
	}
	h, err := clientHandshake(n, conn)
	if err != nil {
		conn.Close()
		n.refused(addr, h.name, err)
		return fmt.Errorf("cluster: dial %s: %w", addr, err)
	}
	_ = raw.SetDeadline(time.Time{})
	ys, err := yamux.Client(newFrameConn(conn), n.yamuxConfig())
	if err != nil {
		conn.Close()
		return err
	}
	// The session is filed under the address dialed, which is how Raft
	// names the peer.
	s := &session{ys: ys, name: h.name, addr: addr, incarnation: h.incarnation, dialer: n.cfg.NodeName}
	if !n.install(s) {
		ys.Close()
		return nil
	}
	n.log.Info("cluster peer connected", zap.String("peer", h.name), zap.String("peer-addr", addr), zap.String("dialer", n.cfg.NodeName))
	go n.serveSession(s) // wg counted by install
	return nil
}

// serveSession accepts the streams the peer opens until the session ends.
// The caller counted it in n.wg (install).
func (n *Node) serveSession(s *session) {
	defer n.wg.Done()
	for {
		st, err := s.ys.AcceptStream()
		if err != nil {
			break
		}
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			st.Close()
			break
		}
		n.wg.Add(1)
		n.mu.Unlock()
		go n.serveStream(s, st)
	}
	s.ys.Close()
	n.mu.Lock()
	var lost []func(string)
	if p := n.peers[s.addr]; p != nil && p.sess == s {
		p.sess = nil
		if !n.closed {
			for _, f := range n.lost {
				lost = append(lost, f)
			}
		}
	}
	n.mu.Unlock()
	for _, f := range lost {
		f(s.addr)
	}
	n.log.Info("cluster peer session ended", zap.String("peer", s.name), zap.String("peer-addr", s.addr))
}

// setLost registers (f nil: removes) group g's hook for ended sessions.
func (n *Node) setLost(g uint64, f func(addr string)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f == nil {
		delete(n.lost, g)
		return
	}
	if n.lost == nil {
		n.lost = make(map[uint64]func(addr string))
	}
	n.lost[g] = f
}

// serveStream reads a stream's kind and hands it to its group or the link
// handler.
func (n *Node) serveStream(s *session, st *yamux.Stream) {
	defer n.wg.Done()
	_ = st.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var kind [1]byte
	if _, err := io.ReadFull(st, kind[:]); err != nil {
		st.Close()
		return
	}
	switch kind[0] {
	case streamRaft:
		var g [8]byte
		if _, err := io.ReadFull(st, g[:]); err != nil {
			st.Close()
			return
		}
		_ = st.SetReadDeadline(time.Time{})
		group := binary.BigEndian.Uint64(g[:])
		n.mu.Lock()
		l := n.groups[group]
		n.mu.Unlock()
		if l == nil {
			n.log.Debug("raft stream for a group this node does not run", zap.String("peer", s.name), zap.Uint64("group", group))
			st.Close()
			return
		}
		select {
		case l.conns <- st:
		case <-l.done:
			st.Close()
		case <-n.done:
			st.Close()
		}
	case streamGroupMeta:
		n.serveGroupMeta(s, st)
	case streamLink, streamMeta:
		_ = st.SetReadDeadline(time.Time{})
		n.mu.Lock()
		h := n.link
		if kind[0] == streamMeta {
			h = n.meta
		}
		n.mu.Unlock()
		if h != nil {
			h(s.name, st)
		}
		st.Close()
	default:
		n.log.Warn("unknown cluster stream kind; closing it", zap.String("peer", s.name), zap.Uint8("kind", kind[0]))
		st.Close()
	}
}

// openStream opens a stream to addr and writes its header.
func (n *Node) openStream(addr string, timeout time.Duration, header []byte) (net.Conn, error) {
	s, err := n.session(addr, timeout)
	if err != nil {
		return nil, err
	}
	st, err := s.ys.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("cluster: open stream to %s: %w", s.name, err)
	}
	if _, err := st.Write(header); err != nil {
		st.Close()
		return nil, fmt.Errorf("cluster: open stream to %s: %w", s.name, err)
	}
	return st, nil
}

// zapWriter turns the lines a library logs (yamux, Raft's hclog) into zap
// warnings.
type zapWriter struct{ log *zap.Logger }

func (w zapWriter) Write(p []byte) (int, error) {
	if s := strings.TrimSpace(string(p)); s != "" {
		w.log.Warn(s)
	}
	return len(p), nil
}
