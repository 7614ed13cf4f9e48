package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The handshake opens every connection to the cluster port, before any
// stream (handshake in doc.go). Messages are frames: a 2-byte big-endian
// length, then the payload (at most maxFrame bytes).
//
//	hello  "WRNC" version(1) status(1) str cluster-id, str node-name,
//	       str advertise, incarnation(8) nonce(32)      (str: 1-byte length)
//	proof  status(1) [hmac(32)]
//
//	client → server  hello
//	server → client  hello, then proof (server's HMAC) unless it refuses
//	client → server  proof (client's HMAC, or status auth-failed)
//	server → client  proof (status only: ok or auth-failed)
//
// The server's HMAC is HMAC-SHA256(secret, "warren-cluster-v1 server" ||
// client hello || server hello), the client's the same with "client": each
// side proves it holds the secret over both fresh nonces, and the secret
// itself never crosses the wire.
const (
	handshakeMagic   = "WRNC"
	handshakeVersion = 1
	nonceLen         = 32
	maxField         = 255
	maxFrame         = 1024
)

// Handshake status codes.
const (
	statusOK           = 0
	statusWrongCluster = 1
	statusAuthFailed   = 2
)

var (
	// ErrNotPeer: the other end does not speak Warren's cluster handshake.
	ErrNotPeer = errors.New("cluster: not a Warren cluster peer")
	// ErrWrongCluster: the peer belongs to a cluster with another id.
	ErrWrongCluster = errors.New("cluster: peer belongs to a different cluster")
	// ErrAuthFailed: the peer (or this node, as the peer saw it) does not
	// hold the cluster's secret.
	ErrAuthFailed = errors.New("cluster: authentication failed (different cluster secret)")
)

// hello is the first message each side sends.
type hello struct {
	status      byte
	cluster     string
	name        string
	advertise   string
	incarnation uint64
	nonce       [nonceLen]byte
}

func (h *hello) appendTo(b []byte) []byte {
	b = append(b, handshakeMagic...)
	b = append(b, handshakeVersion, h.status)
	for _, s := range []string{h.cluster, h.name, h.advertise} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, h.incarnation)
	return append(b, h.nonce[:]...)
}

func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) < 6 || string(b[:4]) != handshakeMagic {
		return h, ErrNotPeer
	}
	if b[4] != handshakeVersion {
		return h, fmt.Errorf("%w: handshake version %d, want %d", ErrNotPeer, b[4], handshakeVersion)
	}
	h.status, b = b[5], b[6:]
	for _, s := range []*string{&h.cluster, &h.name, &h.advertise} {
		if len(b) < 1 || len(b) < 1+int(b[0]) {
			return h, fmt.Errorf("%w: short hello", ErrNotPeer)
		}
		*s, b = string(b[1:1+int(b[0])]), b[1+int(b[0]):]
	}
	if len(b) != 8+nonceLen {
		return h, fmt.Errorf("%w: bad hello length", ErrNotPeer)
	}
	h.incarnation = binary.BigEndian.Uint64(b)
	copy(h.nonce[:], b[8:])
	return h, nil
}

func writeFrame(w io.Writer, payload []byte) error {
	b := make([]byte, 2, 2+len(payload))
	binary.BigEndian.PutUint16(b, uint16(len(payload)))
	_, err := w.Write(append(b, payload...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	l := binary.BigEndian.Uint16(n[:])
	if l > maxFrame {
		return nil, fmt.Errorf("%w: %d-byte handshake frame", ErrNotPeer, l)
	}
	b := make([]byte, l)
	_, err := io.ReadFull(r, b)
	return b, err
}

func proof(secret []byte, role string, clientHello, serverHello []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("warren-cluster-v1 " + role))
	var n [8]byte
	for _, b := range [][]byte{clientHello, serverHello} {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		m.Write(n[:])
		m.Write(b)
	}
	return m.Sum(nil)
}

func newHello(n *Node) (hello, error) {
	h := hello{cluster: n.cfg.ClusterID, name: n.cfg.NodeName, advertise: n.advertise, incarnation: n.incarnation}
	_, err := rand.Read(h.nonce[:])
	return h, err
}

// readProof reads a proof message: its status, and its HMAC when withMAC.
func readProof(rw io.Reader, withMAC bool) (byte, []byte, error) {
	b, err := readFrame(rw)
	if err != nil {
		return 0, nil, err
	}
	if len(b) < 1 || (b[0] == statusOK && withMAC && len(b) != 1+sha256.Size) || (b[0] == statusOK && !withMAC && len(b) != 1) {
		return 0, nil, fmt.Errorf("%w: bad proof message", ErrNotPeer)
	}
	return b[0], b[1:], nil
}

func statusErr(status byte, peerCluster string) error {
	switch status {
	case statusWrongCluster:
		return fmt.Errorf("%w: it is in cluster %q", ErrWrongCluster, peerCluster)
	case statusAuthFailed:
		return fmt.Errorf("%w: the peer refused this node's proof", ErrAuthFailed)
	}
	return fmt.Errorf("%w: handshake status %d", ErrNotPeer, status)
}

// clientHandshake runs the dialing side's handshake on rw and returns the
// server's hello. On error the caller closes the connection.
func clientHandshake(n *Node, rw io.ReadWriter) (hello, error) {
	mine, err := newHello(n)
	if err != nil {
		return hello{}, err
	}
	ch := mine.appendTo(nil)
	if err := writeFrame(rw, ch); err != nil {
		return hello{}, err
	}
	sh, err := readFrame(rw)
	if err != nil {
		return hello{}, err
	}
	theirs, err := decodeHello(sh)
	if err != nil {
		return theirs, err
	}
	if theirs.status != statusOK {
		return theirs, statusErr(theirs.status, theirs.cluster)
	}
	if theirs.cluster != n.cfg.ClusterID {
		return theirs, fmt.Errorf("%w: it is in cluster %q, this node in %q", ErrWrongCluster, theirs.cluster, n.cfg.ClusterID)
	}
	status, mac, err := readProof(rw, true)
	if err != nil {
		return theirs, err
	}
	if status != statusOK {
		return theirs, statusErr(status, theirs.cluster)
	}
	if !hmac.Equal(mac, proof(n.secret, "server", ch, sh)) {
		_ = writeFrame(rw, []byte{statusAuthFailed})
		return theirs, fmt.Errorf("%w: the peer's proof does not match this node's secret", ErrAuthFailed)
	}
	if err := writeFrame(rw, append([]byte{statusOK}, proof(n.secret, "client", ch, sh)...)); err != nil {
		return theirs, err
	}
	if status, _, err = readProof(rw, false); err != nil {
		return theirs, err
	}
	if status != statusOK {
		return theirs, statusErr(status, theirs.cluster)
	}
	return theirs, nil
}

// serverHandshake runs the accepting side's handshake on rw and returns the
// client's hello. On error the caller closes the connection; the client got
// nothing but this node's hello (and the server's proof).
func serverHandshake(n *Node, rw io.ReadWriter) (hello, error) {
	ch, err := readFrame(rw)
	if err != nil {
		return hello{}, err
	}
	theirs, err := decodeHello(ch)
	if err != nil {
		return theirs, err
	}
	mine, err := newHello(n)
	if err != nil {
		return theirs, err
	}
	if theirs.cluster != n.cfg.ClusterID {
		mine.status = statusWrongCluster
		_ = writeFrame(rw, mine.appendTo(nil))
		return theirs, fmt.Errorf("%w: it is in cluster %q, this node in %q", ErrWrongCluster, theirs.cluster, n.cfg.ClusterID)
	}
	sh := mine.appendTo(nil)
	if err := writeFrame(rw, sh); err != nil {
		return theirs, err
	}
	if err := writeFrame(rw, append([]byte{statusOK}, proof(n.secret, "server", ch, sh)...)); err != nil {
		return theirs, err
	}
	status, mac, err := readProof(rw, true)
	if err != nil {
		return theirs, err
	}
	if status != statusOK {
		return theirs, statusErr(status, theirs.cluster)
	}
	if !hmac.Equal(mac, proof(n.secret, "client", ch, sh)) {
		_ = writeFrame(rw, []byte{statusAuthFailed})
		return theirs, fmt.Errorf("%w: the peer's proof does not match this node's secret", ErrAuthFailed)
	}
	return theirs, writeFrame(rw, []byte{statusOK})
}
