package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/zap"
)

// Requests of the metadata group between nodes. Each is one 'M' stream:
//
//	request   'M' op(1) length(4, big-endian) payload
//	response  status(1: 0 ok, 1 error) length(4) payload (the error's text)
//
// propose (payload: request id ‖ command) and join/remove go to the leader
// (a node that is not forwards them to the one it knows); last command is
// answered by the leader only (Sync), and only to a member; await (once it
// has applied the index, AwaitPeers) and info by the node asked.
const (
	metaPropose     = 'P'
	metaJoin        = 'J' // payload: name 0x00 address
	metaRemove      = 'X' // payload: name
	metaInfo        = 'I'
	metaLastCommand = 'A' // no payload; answer: lastCommand's index (8 bytes, big-endian)
	metaAwait       = 'W' // payload: an index (8 bytes); answered once the node applied it (AwaitPeers)
)

// maxMetaPayload bounds a request or response.
const maxMetaPayload = 64 << 20

// call sends one request to the node at addr and returns its response;
// sent reports that the request may have reached the node.
func (l *RaftLog) call(addr string, op byte, payload []byte, timeout time.Duration) (resp []byte, sent bool, err error) {
	conn, err := l.node.openStream(addr, timeout, metaHeader(l.cfg.Group))
	if err != nil {
		return nil, false, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if err := writeMetaFrame(conn, op, payload); err != nil {
		return nil, true, err
	}
	status, resp, err := readMetaFrame(conn)
	if err != nil {
		return nil, true, err
	}
	if status != 0 {
		return nil, true, &remoteError{string(resp)}
	}
	return resp, true, nil
}

// remoteError is an error a peer answered with.
type remoteError struct{ msg string }

func (e *remoteError) Error() string { return e.msg }

func writeMetaFrame(w io.Writer, b byte, payload []byte) error {
	buf := make([]byte, 5, 5+len(payload))
	buf[0] = b
	binary.BigEndian.PutUint32(buf[1:], uint32(len(payload)))
	_, err := w.Write(append(buf, payload...))
	return err
}

func readMetaFrame(r io.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMetaPayload {
		return 0, nil, fmt.Errorf("cluster: metadata request of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return hdr[0], p, nil
}

// serveMeta answers one 'M' stream from an authenticated peer.
func (l *RaftLog) serveMeta(peer string, conn net.Conn) {
	_ = conn.SetDeadline(time.Now().Add(l.cfg.ProposeTimeout + handshakeTimeout))
	op, payload, err := readMetaFrame(conn)
	if err != nil {
		return
	}
	var resp []byte
	if op == metaLastCommand && !l.isMember(peer) {
		// A node that left waits for nothing it will be sent.
		err = errNotMember
	} else {
		resp, err = l.handle(op, payload)
	}
	if err != nil {
		l.log.Debug("metadata request refused", zap.String("peer", peer), zap.String("op", string(op)), zap.Error(err))
		_ = writeMetaFrame(conn, 1, []byte(err.Error()))
		return
	}
	_ = writeMetaFrame(conn, 0, resp)
}

func (l *RaftLog) handle(op byte, payload []byte) ([]byte, error) {
	switch op {
	case metaInfo:
		if l.cfg.Info == nil {
			return []byte("{}"), nil
		}
		return l.cfg.Info(), nil
	case metaPropose:
		// Only the leader takes proposals: the forwarder retries with
		// the leader it learns of.
		if l.raft.State() != raft.Leader {
			return nil, raft.ErrNotLeader
		}
		f := l.raft.Apply(payload, l.cfg.ProposeTimeout)
		if err := f.Error(); err != nil {
			return nil, err
		}
		l.noticeSoon()
		// The entry's index and term, for the proposer to apply it
		// from its own log (applyThrough; the metadata group's, whose
		// recent entries are in memory).
		var e raft.Log
		if l.cfg.Group != MetadataGroup || l.logs.GetLog(f.Index(), &e) != nil {
			return nil, nil
		}
		return entryAt{e.Index, e.Term}.appendTo(nil), nil
	case metaAwait:
		if len(payload) != 8 {
			return nil, errors.New("cluster: bad await request")
		}
		ctx, cancel := context.WithTimeout(context.Background(), awaitPeersLimit)
		defer cancel()
		return nil, l.waitApplied(ctx, binary.BigEndian.Uint64(payload))
	case metaLastCommand:
		if l.raft.State() != raft.Leader {
			return nil, raft.ErrNotLeader
		}
		return binary.BigEndian.AppendUint64(nil, l.lastCommand()), nil
	case metaJoin:
		name, addr, ok := strings.Cut(string(payload), "\x00")
		if !ok || name == "" || addr == "" {
			return nil, errors.New("cluster: bad join request")
		}
		return nil, l.leaderDo(op, payload, func() error { return l.addVoter(name, addr) })
	case metaRemove:
		name := string(payload)
		return nil, l.leaderDo(op, payload, func() error { return l.removeServer(name) })
	}
	return nil, fmt.Errorf("cluster: unknown metadata request %q", op)
}

// leaderDo runs f on the leader: here when this node leads, else forwarded
// once to the leader it knows.
func (l *RaftLog) leaderDo(op byte, payload []byte, f func() error) error {
	if l.raft.State() == raft.Leader {
		return f()
	}
	addr, _ := l.raft.LeaderWithID()
	if addr == "" {
		return errNoLeader
	}
	_, _, err := l.call(string(addr), op, payload, l.cfg.ProposeTimeout)
	return err
}

// errNotMember refuses a sync to a node outside the group's configuration.
var errNotMember = errors.New("cluster: not a member of the cluster")

// isMember reports whether the node named name is in the group's latest
// configuration.
func (l *RaftLog) isMember(name string) bool {
	_, ok := l.Members()[name]
	return ok
}

// errNotSeeded refuses a join before the group's first snapshot.
var errNotSeeded = errors.New("cluster: the cluster is starting (no first snapshot yet); retry")

func (l *RaftLog) addVoter(name, addr string) error {
	if !l.seeded.Load() {
		return errNotSeeded
	}
	cf := l.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == name && string(s.Address) == addr {
			return nil
		}
		if string(s.Address) == addr && string(s.ID) != name {
			// A node came back at the same address under another name.
			err := l.raft.RemoveServer(s.ID, 0, l.cfg.ProposeTimeout).Error()
			l.membersChanged()
			if err != nil {
				return err
			}
		}
	}
	l.log.Info("adding a node to the cluster", zap.String("peer", name), zap.String("peer-addr", addr))
	defer l.membersChanged()
	return l.raft.AddVoter(raft.ServerID(name), raft.ServerAddress(addr), 0, l.cfg.ProposeTimeout).Error()
}

func (l *RaftLog) removeServer(name string) error {
	cf := l.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == name {
			l.log.Info("removing a node from the cluster", zap.String("peer", name))
			defer l.membersChanged()
			return l.raft.RemoveServer(s.ID, 0, l.cfg.ProposeTimeout).Error()
		}
	}
	return fmt.Errorf("%w: %s", ErrNotMember, name)
}

// Join asks the nodes at seeds (cluster addresses) to add this node to
// their cluster, trying each in turn until one succeeds or ctx ends.
func (l *RaftLog) Join(ctx context.Context, seeds []string) error {
	payload := []byte(l.node.Name() + "\x00" + l.node.Addr())
	var last error
	for attempt := 0; ; attempt++ {
		for _, seed := range seeds {
			if seed == l.node.Addr() {
				continue
			}
			_, _, err := l.call(seed, metaJoin, payload, l.cfg.ProposeTimeout)
			if err == nil {
				l.log.Info("joined the cluster", zap.String("seed", seed))
				return nil
			}
			last = err
			if attempt%10 == 0 {
				l.log.Warn("join through a seed failed; retrying", zap.String("seed", seed), zap.Error(err))
			}
		}
		if last == nil {
			return errors.New("cluster: no seed to join other than this node")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: join: %w (last: %v)", ctx.Err(), last)
		case <-l.done:
			return ErrClosed
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Remove takes the node named name out of the group (Leave for this node,
// forget_cluster_node for another), through the leader.
func (l *RaftLog) Remove(name string) error {
	return l.leaderDo(metaRemove, []byte(name), func() error { return l.removeServer(name) })
}

// Member is one node of the group as Status reports it.
type Member struct {
	Name   string `json:"name"`
	Addr   string `json:"cluster_addr"`
	Voter  bool   `json:"voter"`
	Leader bool   `json:"metadata_leader"`
	// Running is set when the node answered; Info is its status (the
	// RaftLogConfig.Info of that node).
	Running bool            `json:"running"`
	Info    json.RawMessage `json:"info,omitempty"`
}

// Status lists the group's members as this node knows them, each asked for
// its status within timeout.
func (l *RaftLog) Status(timeout time.Duration) ([]Member, error) {
	cf := l.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, err
	}
	leaderAddr, _ := l.raft.LeaderWithID()
	servers := cf.Configuration().Servers
	out := make([]Member, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		out[i] = Member{Name: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter,
			Leader: s.Address == leaderAddr && leaderAddr != ""}
		if string(s.Address) == l.node.Addr() {
			out[i].Running = true
			if l.cfg.Info != nil {
				out[i].Info = l.cfg.Info()
			}
			continue
		}
		wg.Add(1)
		go func(m *Member) {
			defer wg.Done()
			info, _, err := l.call(m.Addr, metaInfo, nil, timeout)
			if err == nil {
				m.Running, m.Info = true, info
			}
		}(&out[i])
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Uptime is how long the log has run.
func (l *RaftLog) Uptime() time.Duration { return time.Since(l.start) }
