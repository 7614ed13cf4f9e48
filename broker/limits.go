package broker

import (
	"github.com/warrenmq/warren/amqp"
)

// Limits on connections and queues, checked as RabbitMQ checks its node
// connection_max, its vhost limits (max-connections, max-queues) and its
// user limits (max-connections, and max-channels in userlimits.go). Zero
// means no limit in the configuration, RabbitMQ's default; a user's limit
// is none when negative or not set, and 0 refuses everything.
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
	userMax := userLimit(b.users[username], UserLimitMaxConnections)
	vhostMax := vhostLimit(b.vhosts[vhostName], VHostLimitMaxConnections)
	if cfg.MaxConnections > 0 || cfg.MaxConnectionsPerVHost > 0 || cfg.MaxConnectionsPerUser > 0 || userMax >= 0 || vhostMax >= 0 {
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
		case vhostMax >= 0 && int64(inVHost) >= vhostMax:
			return amqp.Errorf(amqp.NotAllowed, cls, mth,
				"access to vhost '%s' refused for user '%s': connection limit (%d) is reached",
				vhostName, username, vhostMax)
		case cfg.MaxConnectionsPerUser > 0 && ofUser >= cfg.MaxConnectionsPerUser:
			return amqp.Errorf(amqp.NotAllowed, cls, mth,
				"Connection refused for user '%s': user connection limit (%d) is reached",
				username, cfg.MaxConnectionsPerUser)
		case userMax >= 0 && int64(ofUser) >= userMax:
			// The user's max-connections (userlimits.go), in RabbitMQ's
			// words.
			return amqp.Errorf(amqp.NotAllowed, cls, mth,
				"connection refused for user '%s': user connection limit (%d) is reached", username, userMax)
		}
	}
	c.vhostNm, c.userNm = vhostName, username
	return nil
}

// queueLimitLocked refuses a new queue with 406 PRECONDITION_FAILED when
// the vhost has Config.MaxQueuesPerVHost queues, or its own max-queues.
// Hold v.mu.
func (v *vhost) queueLimitLocked(name string) error {
	limit := int64(v.b.cfg.MaxQueuesPerVHost)
	if limit <= 0 {
		limit = -1
	}
	if own := v.maxQueues.Load(); own >= 0 && (limit < 0 || own < limit) {
		limit = own // the vhost's own max-queues (vhostlimits.go)
	}
	if limit < 0 || int64(len(v.queues)) < limit {
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

// NodeState is what the readiness health checks look at.
type NodeState struct {
	// Closed is set once the broker is closing.
	Closed bool
	// Listening: an AMQP or AMQPS listener is open.
	Listening bool
	// Connections counts the client connections, those in their
	// handshake included (as RabbitMQ's listener counts them).
	Connections int
	// MaxConnections is the node's limit (Config.MaxConnections; 0 =
	// none).
	MaxConnections int
}

// NodeState returns the node's state for the readiness checks.
func (b *Broker) NodeState() NodeState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return NodeState{Closed: b.closed, Listening: b.ln != nil || b.tlsLn != nil, Connections: len(b.conns),
		MaxConnections: b.cfg.MaxConnections}
}

// AtConnectionLimit reports whether the node has reached its connection
// limit.
func (n NodeState) AtConnectionLimit() bool {
	return n.MaxConnections > 0 && n.Connections >= n.MaxConnections
}
