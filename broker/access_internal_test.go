package broker

import (
	"net"
	"testing"
)

func TestLoopbackOnly(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		user string
		addr net.Addr
		want bool
	}{
		{"guest", &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}, false},
		{"guest", &net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}, false},
		{"guest", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}, true},
		{"guest", pipeAddr{}, true},
		{"alice", &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}, false},
	}
	for _, tc := range tests {
		if got := b.loopbackOnly(tc.user, tc.addr); got != tc.want {
			t.Errorf("loopbackOnly(%s, %v) = %v, want %v", tc.user, tc.addr, got, tc.want)
		}
	}
	b, _ = New(Config{LoopbackUsers: []string{}})
	if b.loopbackOnly("guest", &net.TCPAddr{IP: net.ParseIP("10.1.2.3")}) {
		t.Error("empty LoopbackUsers still restricts guest")
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
