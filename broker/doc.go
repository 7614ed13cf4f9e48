// Package broker is the Warren server: listeners, connections, channels,
// virtual hosts, users, and the glue that drives a publish through the
// exchanges into queues and out to consumers.
//
// # Goroutines
//
// Each connection has exactly two goroutines: a reader (conn.serve), which
// reads frames and runs every channel of the connection, and a writer
// (outbound.run), which writes what the reader and the queues append to the
// connection's outbound buffer. Besides, Serve runs one accept loop per
// listener (AMQP, and amqps when configured) and the resource monitor
// (alarm.go), and waits for them. Queues have no goroutine: whoever changes a
// queue (a publisher's reader, a consumer's reader acknowledging, a writer
// that found room again) dispatches its deliveries while holding its lock.
//
// # Lock order
//
// Locks are taken in this order and never the other way round:
//
//	Broker.mu → vhost.mu → queueEntity.mu → channel.mu → outbound.mu
//
// conn.starvedMu, channel.starvedMu, alarms.mu and replyRegistry.mu are
// leaf locks. At most one queueEntity.mu is held at a time: dead letters
// are collected under the source queue's lock and routed to the
// dead-letter exchange's queues after it is released (deadletter.go).
// Queue timers (message expiry, x-expires) and the consumer-timeout
// checker run on goroutines of their own and take the locks in this order.
// Permission checks (access.go) take Broker.mu alone, with no other lock
// held, before the handler takes any. Nothing blocks, does I/O, or waits on
// a Go channel while holding any of them; the writer does its socket writes
// with no lock held.
package broker
