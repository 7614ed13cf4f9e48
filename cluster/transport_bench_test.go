package cluster

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkClusterApply applies 100-byte commands to a 3-node group over the
// authenticated cluster port (real TCP, yamux, stores with real fsyncs), from
// 1 and 64 concurrent proposers on the leader: commit latency and throughput
// of the transport and the store together, at Raft's default timeouts.
func BenchmarkClusterApply(b *testing.B) {
	for _, proposers := range []int{1, 64} {
		b.Run(fmt.Sprintf("proposers=%d", proposers), func(b *testing.B) {
			secret := writeSecret(b, "0123456789abcdef-cluster-secret")
			ms := make([]*member, 3)
			for i := range ms {
				ms[i] = startMember(b, i, "bench", secret)
				ms[i].tune = func(c *raft.Config) { // Raft's default timeouts
					d := raft.DefaultConfig()
					c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
				}
			}
			defer func() {
				for _, m := range ms {
					m.stop(b)
				}
			}()
			for _, m := range ms {
				m.startGroup(b, 1, servers(ms), nil)
			}
			r := groupLeader(b, ms, 1).rafts[1]
			cmd := make([]byte, 100)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + proposers - 1) / proposers
			for range proposers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if err := r.Apply(cmd, 0).Error(); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
