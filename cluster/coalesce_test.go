package cluster

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/yamux"
)

// recordConn records each write it is given.
type recordConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, bytes.Clone(p))
	c.mu.Unlock()
	return len(p), nil
}

// TestFrameConnJoinsHeaderAndBody: a data frame's header and body reach the
// connection as one write, in order; other frames and a body too large to
// copy go as they came.
func TestFrameConnJoinsHeaderAndBody(t *testing.T) {
	rc := &recordConn{}
	fc := newFrameConn(rc)
	data := []byte{0, yamuxTypeData, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3}
	ping := []byte{0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7}
	empty := []byte{0, yamuxTypeData, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0} // FIN, no body
	big := bytes.Repeat([]byte{9}, frameCopyMax+1)
	bigHdr := []byte{0, yamuxTypeData, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1}
	for _, w := range [][]byte{data, []byte("abc"), ping, empty, bigHdr, big} {
		if n, err := fc.Write(w); err != nil || n != len(w) {
			t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
		}
	}
	want := [][]byte{append(bytes.Clone(data), "abc"...), ping, empty, bigHdr, big}
	if len(rc.writes) != len(want) {
		t.Fatalf("%d writes, want %d", len(rc.writes), len(want))
	}
	for i := range want {
		if !bytes.Equal(rc.writes[i], want[i]) {
			t.Fatalf("write %d: %d bytes %x..., want %d bytes", i, len(rc.writes[i]), rc.writes[i][:min(16, len(rc.writes[i]))], len(want[i]))
		}
	}
}

// TestFrameConnYamuxOverTCP: streams of a yamux session whose both ends
// write through frameConn on TCP carry what was written, both ways.
func TestFrameConnYamuxOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc := <-accepted
	if sc == nil {
		t.Fatal("accept failed")
	}
	if _, ok := newFrameConn(cc).Conn.(*net.TCPConn); !ok {
		t.Fatal("not a TCP connection")
	}
	client, err := yamux.Client(newFrameConn(cc), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := yamux.Server(newFrameConn(sc), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	// The server echoes every stream.
	go func() {
		for {
			st, err := server.Accept()
			if err != nil {
				return
			}
			go func() {
				defer st.Close()
				_, _ = io.Copy(st, st)
			}()
		}
	}()
	var wg sync.WaitGroup
	for s := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := client.Open()
			if err != nil {
				t.Error(err)
				return
			}
			defer st.Close()
			r := rand.New(rand.NewPCG(uint64(s), 1))
			var sent bytes.Buffer
			for range 200 {
				p := make([]byte, 1+r.IntN(70000))
				for i := range p {
					p[i] = byte(r.Uint32())
				}
				sent.Write(p)
			}
			go func() { _, _ = st.Write(sent.Bytes()) }()
			got := make([]byte, sent.Len())
			if _, err := io.ReadFull(st, got); err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(got, sent.Bytes()) {
				t.Errorf("stream %d: %d bytes back, %d sent, or not the same", s, len(got), sent.Len())
			}
		}()
	}
	wg.Wait()
}
