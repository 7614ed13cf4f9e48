package main

import (
	"net"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/cluster"
)

// The node link of a clustered warren: the broker's Config.Link dials the
// other nodes' brokers over this node's cluster port, to the addresses the
// metadata group's configuration gives for their names, and this node's
// cluster port hands the link streams it accepts to its broker.

// brokerLink returns the broker's node link (nil when clustering is off).
func (c *clustered) brokerLink() broker.Link {
	if c == nil {
		return nil
	}
	if c.link == nil {
		c.link = cluster.NewBrokerLink(c.node)
	}
	return c.link
}

// nodeName is the broker's Config.NodeName ("" when clustering is off).
func (c *clustered) nodeName() string {
	if c == nil {
		return ""
	}
	return c.node.Name()
}

// serveLink hands the link streams the cluster port accepts to b. Streams
// accepted before are closed, and their dialer dials again.
func (c *clustered) serveLink(b *broker.Broker) {
	if c == nil {
		return
	}
	c.node.HandleLink(func(peer string, conn net.Conn) { b.ServeLink(peer, conn) })
}

// followMembers makes the link take its peers from the metadata group's
// configuration, once the group has started (run).
func (c *clustered) followMembers() {
	if c == nil || c.link == nil || c.meta == nil {
		return
	}
	c.link.Follow(c.meta)
}
