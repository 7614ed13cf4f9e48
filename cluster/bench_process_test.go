package cluster_test

import (
	"fmt"
	"testing"
)

// BenchmarkClusterDeclare declares durable queues one after another (each
// waits for its declare-ok) through the metadata leader and through a
// follower of a 3-process cluster on this machine.
func BenchmarkClusterDeclare(b *testing.B) {
	nodes := threeNodes(b, localIPs)
	startCluster(b, nodes...)
	_, leaderName := nodes[0].members()
	var leader, follower *wnode
	for _, n := range nodes {
		if n.name == leaderName {
			leader = n
		} else {
			follower = n
		}
	}
	for _, c := range []struct {
		name string
		n    *wnode
	}{{"leader", leader}, {"follower", follower}} {
		seq := 0 // names stay new across the benchmark's runs
		b.Run(c.name, func(b *testing.B) {
			_, ch := dial(b, c.n)
			b.ResetTimer()
			for range b.N {
				seq++
				if _, err := ch.QueueDeclare(fmt.Sprintf("bench-%s-%d", c.name, seq), true, false, false, false, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "declares/s")
		})
	}
}
