package cluster

import (
	"encoding/binary"
	"net"
)

// frameConn is the connection a yamux session writes to. yamux's send loop
// writes a data frame as two writes, its 12-byte header then its body, so
// every frame on the cluster port cost two system calls and, with
// TCP_NODELAY, two segments, each waking the peer: a Raft heartbeat and its
// answer, four. frameConn holds a data frame's header back and writes it
// together with the body that follows (one writev on TCP, one record on
// TLS), so a frame is one write. Only the session's send loop writes, so
// nothing here is locked; the bytes and their order are unchanged.
type frameConn struct {
	net.Conn
	hdr  [yamuxHeaderSize]byte
	held bool
	bufs net.Buffers
	// tcp is the connection when it is plain TCP (writev); nil under TLS,
	// where the two are copied into buf and written as one record.
	tcp *net.TCPConn
	buf []byte
}

const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
	// frameCopyMax is the largest body copied next to its header under
	// TLS; a larger one is written after the header, as yamux would.
	frameCopyMax = 64 << 10
)

func newFrameConn(c net.Conn) *frameConn {
	fc := &frameConn{Conn: c}
	fc.tcp, _ = c.(*net.TCPConn)
	return fc
}

func (c *frameConn) Write(p []byte) (int, error) {
	if c.held {
		c.held = false
		return c.writeFrame(p)
	}
	if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:]) > 0 {
		// A data frame's header: its body is the next write.
		copy(c.hdr[:], p)
		c.held = true
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// writeFrame writes the held header, then p, in one write when it can. It
// returns the bytes of p written.
func (c *frameConn) writeFrame(p []byte) (int, error) {
	switch {
	case c.tcp != nil:
		c.bufs = append(c.bufs[:0], c.hdr[:], p)
		bufs := c.bufs // WriteTo consumes the slice it is given
		n, err := bufs.WriteTo(c.tcp)
		c.bufs[0], c.bufs[1] = nil, nil
		return max(int(n)-yamuxHeaderSize, 0), err
	case len(p) <= frameCopyMax:
		c.buf = append(append(c.buf[:0], c.hdr[:]...), p...)
		n, err := c.Conn.Write(c.buf)
		return max(n-yamuxHeaderSize, 0), err
	}
	if _, err := c.Conn.Write(c.hdr[:]); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
