package web

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenmq/warren/broker"
)

// Prometheus metrics, named as RabbitMQ's rabbitmq_prometheus plugin names
// them where it has a name. A custom collector reads broker snapshots at
// scrape time: nothing is kept between scrapes.

var (
	descQueueMessages    = prometheus.NewDesc("rabbitmq_queue_messages", "Sum of ready and unacknowledged messages", []string{"vhost", "queue"}, nil)
	descQueueReady       = prometheus.NewDesc("rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers", []string{"vhost", "queue"}, nil)
	descQueueUnacked     = prometheus.NewDesc("rabbitmq_queue_messages_unacked", "Messages delivered to consumers but not yet acknowledged", []string{"vhost", "queue"}, nil)
	descQueueReadyBytes  = prometheus.NewDesc("rabbitmq_queue_messages_ready_bytes", "Size in bytes of ready messages", []string{"vhost", "queue"}, nil)
	descQueueConsumers   = prometheus.NewDesc("rabbitmq_queue_consumers", "Consumers on a queue", []string{"vhost", "queue"}, nil)
	descQueuePublished   = prometheus.NewDesc("rabbitmq_queue_messages_published_total", "Messages published to a queue", []string{"vhost", "queue"}, nil)
	descConnections      = prometheus.NewDesc("rabbitmq_connections", "Connections currently open", nil, nil)
	descChannels         = prometheus.NewDesc("rabbitmq_channels", "Channels currently open", nil, nil)
	descQueues           = prometheus.NewDesc("rabbitmq_queues", "Queues available", nil, nil)
	descConsumers        = prometheus.NewDesc("rabbitmq_consumers", "Consumers currently connected", nil, nil)
	descExchanges        = prometheus.NewDesc("rabbitmq_exchanges", "Exchanges available", nil, nil)
	descVHosts           = prometheus.NewDesc("rabbitmq_vhosts", "Virtual hosts", nil, nil)
	descReceived         = prometheus.NewDesc("rabbitmq_global_messages_received_total", "Total number of messages received from publishers (counted per queue they were enqueued in)", nil, nil)
	descDelivered        = prometheus.NewDesc("rabbitmq_global_messages_delivered_total", "Total number of messages delivered to consumers and basic.get", nil, nil)
	descDeliveredConsume = prometheus.NewDesc("rabbitmq_global_messages_delivered_consume_total", "Total number of messages delivered to consumers", nil, nil)
	descDeliveredGet     = prometheus.NewDesc("rabbitmq_global_messages_delivered_get_total", "Total number of messages fetched with basic.get", nil, nil)
	descRedelivered      = prometheus.NewDesc("rabbitmq_global_messages_redelivered_total", "Total number of messages redelivered to consumers", nil, nil)
	descAcknowledged     = prometheus.NewDesc("rabbitmq_global_messages_acknowledged_total", "Total number of messages acknowledged by consumers", nil, nil)
	descBuildInfo        = prometheus.NewDesc("rabbitmq_build_info", "Warren version", []string{"rabbitmq_version", "product"}, nil)
	descIdentity         = prometheus.NewDesc("rabbitmq_identity_info", "Node identity", []string{"rabbitmq_node", "rabbitmq_cluster"}, nil)
)

// collector is the broker's prometheus.Collector.
type collector struct{ b *broker.Broker }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descQueueMessages, descQueueReady, descQueueUnacked, descQueueReadyBytes, descQueueConsumers, descQueuePublished,
		descConnections, descChannels, descQueues, descConsumers, descExchanges, descVHosts,
		descReceived, descDelivered, descDeliveredConsume, descDeliveredGet, descRedelivered, descAcknowledged,
		descBuildInfo, descIdentity,
	} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	qs, _ := c.b.Queues("")
	for _, q := range qs {
		gauge(descQueueMessages, float64(q.Ready+q.Unacked), q.VHost, q.Name)
		gauge(descQueueReady, float64(q.Ready), q.VHost, q.Name)
		gauge(descQueueUnacked, float64(q.Unacked), q.VHost, q.Name)
		gauge(descQueueReadyBytes, float64(q.ReadyBytes), q.VHost, q.Name)
		gauge(descQueueConsumers, float64(q.Consumers), q.VHost, q.Name)
		counter(descQueuePublished, q.Stats.Publish, q.VHost, q.Name)
	}
	o := c.b.Overview()
	gauge(descConnections, float64(o.Connections))
	gauge(descChannels, float64(o.Channels))
	gauge(descQueues, float64(o.Queues))
	gauge(descConsumers, float64(o.Consumers))
	gauge(descExchanges, float64(o.Exchanges))
	gauge(descVHosts, float64(o.VHosts))
	counter(descReceived, o.Totals.Publish)
	counter(descDelivered, o.Totals.Deliver+o.Totals.Get)
	counter(descDeliveredConsume, o.Totals.Deliver)
	counter(descDeliveredGet, o.Totals.Get)
	counter(descRedelivered, o.Totals.Redeliver)
	counter(descAcknowledged, o.Totals.Ack)
	gauge(descBuildInfo, 1, broker.Version, "Warren")
	gauge(descIdentity, 1, nodeName(), nodeName())
}

// metricsHandler serves /metrics (and /metrics/, as RabbitMQ does) from a
// registry of the server's own.
func (s *Server) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{s.b}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	mux.Handle("GET /metrics/{$}", h)
	return mux
}
