// Package exchange holds the routing tables of AMQP 0-9-1 exchanges: direct, fanout, topic
// and headers. Given the bindings of one exchange, a Router answers which destinations
// (queues or other exchanges) a message with a routing key and headers reaches.
//
// The package is pure: no goroutines, no I/O, no logging and no locking. A Router is not safe
// for concurrent mutation. The caller (package broker) serialises Bind, Unbind and
// RemoveDestination under its per-vhost write lock and calls Route, Bindings and Len under the
// read lock. Route never writes to router state, so any number of goroutines may call it at
// once, and it does not allocate when out has room for the result.
//
// Exchange-to-exchange bindings and alternate exchanges are composed by the caller: Route
// reports DestExchange destinations as they are, and the caller routes through them in turn
// (guarding against cycles).
//
// Semantics are RabbitMQ's (rabbit_exchange_type_{direct,fanout,topic,headers}.erl and
// rabbit_db_topic_exchange.erl):
//
//   - direct: the binding key equals the routing key.
//   - fanout: every binding matches; keys are ignored.
//   - topic: keys are split on '.' into words; in a binding key '*' matches exactly one word
//     and '#' zero or more. Empty words are words ("a..b" has three, "a." two), but the
//     empty key "" has no words at all, as RabbitMQ's split_topic_key(<<>>) -> [] has it: ""
//     is matched by "", "#" and "#.#", not by "*".
//   - headers: see ValidateHeadersArgs and the x-match modes all, any, all-with-x, any-with-x.
//   - x-consistent-hash and x-modulus-hash (RabbitMQ's consistent-hash plugin and 4.3's
//     modulus-hash type): one destination per message, by a hash of the key
//     (consistenthash.go). ParseType knows them; ParseKind only the four AMQP types.
//
// A binding is identified by its destination, its key and its arguments (table equality), as
// in RabbitMQ; two bindings that differ only in key or arguments are distinct even for fanout
// and headers exchanges. Route reports each destination at most once per call however many of
// its bindings match.
package exchange
