package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker/brokertest"
)

// BenchmarkQueuesList10k times GET /api/queues with 10,000 queues, over
// HTTP on loopback, response read to the end:
//
//	go test ./web/ -run '^$' -bench QueuesList10k -benchtime 20x
//
// "page_size=500" alone does not paginate (as in RabbitMQ: pagination
// needs page), so it is the whole list; "page=1&page_size=500" is the
// first page of 500; "page=3&page_size=50&name=q01&sort=name" a page of
// 50 as the console asks for it, filtered and sorted. A page builds the
// JSON of its queues only (writeListOf).
func BenchmarkQueuesList10k(b *testing.B) {
	bs := brokertest.Start(b, nil)
	srv, err := New(Config{SampleInterval: time.Hour}, bs.Broker)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(ts.Close)
	declareQueues(b, bs.Broker, 10000)
	for _, q := range []string{"page_size=500", "page=1&page_size=500", "page=3&page_size=50&name=q01&sort=name"} {
		b.Run(q, func(b *testing.B) {
			b.ReportAllocs()
			var size int64
			for b.Loop() {
				req, _ := http.NewRequest("GET", ts.URL+"/api/queues?"+q, nil)
				req.SetBasicAuth("guest", "guest")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				size, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != 200 {
					b.Fatalf("status %d", res.StatusCode)
				}
			}
			b.ReportMetric(float64(size), "body-bytes")
		})
	}
}
