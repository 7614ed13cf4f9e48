package exchange

import "strconv"

// Kind names an exchange type.
type Kind uint8

// The exchange types built into AMQP 0-9-1 brokers.
const (
	Direct Kind = iota
	Fanout
	Topic
	Headers
	// ConsistentHash and ModulusHash are RabbitMQ's x-consistent-hash (plugin) and
	// x-modulus-hash (4.3) types (consistenthash.go).
	ConsistentHash
	ModulusHash
)

var kindNames = [...]string{
	Direct:  "direct",
	Fanout:  "fanout",
	Topic:   "topic",
	Headers: "headers",

	ConsistentHash: "x-consistent-hash",
	ModulusHash:    "x-modulus-hash",
}

// ParseKind returns the Kind named s as it appears in exchange.declare ("direct", "fanout",
// "topic", "headers"). Any other name, including plugin types such as "x-delayed-message",
// reports false; the caller answers with 503 COMMAND_INVALID "invalid exchange type".
func ParseKind(s string) (Kind, bool) {
	for k, name := range kindNames[:ConsistentHash] {
		if s == name {
			return Kind(k), true
		}
	}
	return 0, false
}

// String returns the exchange type's wire name, or "Kind(N)" for an unknown value.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseType is ParseKind that also knows the hash exchange types Warren has built in,
// x-consistent-hash and x-modulus-hash.
func ParseType(s string) (Kind, bool) {
	for k, name := range kindNames {
		if s == name {
			return Kind(k), true
		}
	}
	return 0, false
}
