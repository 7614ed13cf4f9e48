package store

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAppend16B measures group-commit throughput: parallel appenders of 16-byte
// messages with a done callback each, with real fsync.
func BenchmarkAppend16B(b *testing.B) {
	s := openTest(b, b.TempDir(), func(c *Config) { c.NoSync = false })
	body := make([]byte, 16)
	var seq atomic.Uint64
	var wg sync.WaitGroup
	done := func(err error) {
		if err != nil {
			b.Error(err)
		}
		wg.Done()
	}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		m := &Message{Exchange: "amq.direct", RoutingKey: "bench", Header: make([]byte, 14), Body: body}
		for pb.Next() {
			wg.Add(1)
			n := seq.Add(1)
			s.Append(n%64, n, m, done)
		}
	})
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkAppendRemove is publish plus ack: each appender removes the message it
// appended 1000 messages earlier, as consumers keep up with a short queue.
func BenchmarkAppendRemove(b *testing.B) {
	s := openTest(b, b.TempDir(), func(c *Config) { c.NoSync = false })
	body := make([]byte, 16)
	var queue atomic.Uint64
	var wg sync.WaitGroup
	done := func(error) { wg.Done() }
	b.ReportAllocs()
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		q := queue.Add(1)
		m := &Message{Exchange: "amq.direct", RoutingKey: "bench", Header: make([]byte, 14), Body: body}
		var seq uint64
		for pb.Next() {
			wg.Add(1)
			s.Append(q, seq, m, done)
			if seq >= 1000 {
				s.Remove(q, seq-1000)
			}
			seq++
		}
	})
	wg.Wait()
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkLogAppend measures durable log appends (real fsync): appenders
// goroutines, each appending one 64-byte entry at a time to its own log (a
// Raft group's leader storing one entry), each waiting for its entry to be
// durable before the next, all through the one group-commit writer.
func BenchmarkLogAppend(b *testing.B) {
	for _, appenders := range []int{1, 64} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			s := openTest(b, b.TempDir(), func(c *Config) { c.NoSync = false })
			data := make([]byte, 64)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for g := range appenders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := s.Log(uint64(g + 1))
					e := []LogEntry{{Term: 1, Data: data}}
					for i := uint64(1); next.Add(1) <= int64(b.N); i++ {
						e[0].Index = i
						if err := l.AppendWait(e); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
		})
	}
}
