package broker

import "github.com/warrenmq/warren/amqp"

// Alternate exchanges: an exchange whose own bindings route a message
// nowhere hands it to the exchange its alternate-exchange argument (or a
// policy's alternate-exchange) names, and so on along a chain; the walk in
// vhost.routeLocked visits each exchange once, so cycles end. A mandatory
// message is returned only when nothing at all took it.

// alternateOf is the alternate-exchange argument of an exchange.declare;
// a value that is not a string is ignored, as RabbitMQ ignores it.
func alternateOf(args amqp.Table) string {
	s, _ := args["alternate-exchange"].(string)
	return s
}
