// Package testport hands tests TCP ports for listeners that must get the
// same port again after a restart (a cluster node's cluster port).
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// handedOut holds the ports Below returned in this process.
var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)

// Below returns an address on ip with a port free a moment ago, taken below
// the kernel's ephemeral range: a port from that range may be given to an
// outgoing connection (of any test running meanwhile) while the node that
// listened on it is down, and held for as long as that connection lives.
func Below(t testing.TB, ip string) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > 2048 {
			low = lo
		}
	}
	base := max(1024, low-16384)
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	for range 1000 {
		port := base + rand.IntN(low-base)
		if handedOut[port] {
			continue
		}
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		handedOut[port] = true
		return addr
	}
	t.Fatalf("no free port on %s below %d", ip, low)
	return ""
}
