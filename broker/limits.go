package broker

import (
	"github.com/warrenmq/warren/amqp"
)

// Limits on connections and queues, checked as RabbitMQ checks its node
// connection_max, its vhost limits (max-connections, max-queues) and its
// user limits (max-connections). Zero means no limit, RabbitMQ's default.
// Channel-max, frame-max, the message size, the nesting of field tables
// (Config.MaxTableDepth, at most amqp.MaxTableDepth) and the length of
// names (255, a shortstr) are enforced where frames are read and decoded.

// admitConn counts the connection in at connection.open, or refuses it
// with 530 NOT_ALLOWED when the node, the vhost or the user has reached its
// connection limit. The count and the admission happen under Broker.mu.
func (b *Broker) admitConn(c *conn, vhostName, username string) error {
	const cls, mth = amqp.ClassConnection, 40
	cfg := &b.cfg
	b.mu.Lock()
	defer b.mu.Unlock()
	if cfg.MaxConnections > 0 || cfg.MaxConnectionsPerVHost > 0 || cfg.MaxConnectionsPerUser > 0 {
		var all, inVHost, ofUser int
		for o := range b.conns {
			if o.vhostNm == "" {
				continue
			}
			all++
			if o.vhostNm == vhostName {
				inVHost++
			}
			if o.userNm == username {
				ofUser++
			}
		}
		switch {
		case cfg.MaxConnections > 0 && all >= cfg.MaxConnections:
			return amqp.Errorf(amqp.NotAllowed, cls, mth,
				"connection refused: node connection limit (%d) is reached", cfg.MaxConnections)
		case cfg.MaxConnectionsPerVHost > 0 && inVHost >= cfg.MaxConnectionsPerVHost:
			return amqp.Errorf(amqp.NotAllowed, cls, mth,
				"access to vhost '%s' refused for user '%s': connection limit (%d) is reached",
				vhostName, username, cfg.MaxConnectionsPerVHost)
		case cfg.MaxConnectionsPerUser > 0 && ofUser >= cfg.MaxConnectionsPerUser:
			return amqp.Errorf(amqp.NotAllowed, cls, mth,
				"Connection refused for user '%s': user connection limit (%d) is reached",
				username, cfg.MaxConnectionsPerUser)
		}
	}
	c.vhostNm, c.userNm = vhostName, username
	return nil
}

// queueLimitLocked refuses a new queue with 406 PRECONDITION_FAILED when
// the vhost has Config.MaxQueuesPerVHost queues. Hold v.mu.
func (v *vhost) queueLimitLocked(name string) error {
	limit := v.b.cfg.MaxQueuesPerVHost
	if limit <= 0 || len(v.queues) < limit {
		return nil
	}
	return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassQueue, 10,
		"cannot declare queue '%s': queue limit in vhost '%s' (%d) is reached", name, v.name, limit)
}

// VHostLimits are the limits every vhost has (Config.MaxConnectionsPerVHost
// and Config.MaxQueuesPerVHost; 0 = none).
func (b *Broker) VHostLimits() (maxConnections, maxQueues int) {
	return b.cfg.MaxConnectionsPerVHost, b.cfg.MaxQueuesPerVHost
}
