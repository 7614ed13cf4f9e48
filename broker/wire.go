package broker

import (
	"encoding/binary"

	"github.com/warrenmq/warren/amqp"
)

// appendFrameHeader appends the 7-byte header of a frame whose payload of
// size bytes the caller appends next, followed by amqp.FrameEnd.
func appendFrameHeader(b []byte, typ uint8, channel uint16, size int) []byte {
	return append(b, typ, byte(channel>>8), byte(channel), byte(size>>24), byte(size>>16), byte(size>>8), byte(size))
}

// appendMethod appends a method frame for the hot-path methods. Taking
// the concrete type keeps m on the caller's stack (no interface, no
// allocation).
func appendMethod(b []byte, channel uint16, m *amqp.BasicDeliver) []byte {
	start := len(b)
	b = appendFrameHeader(b, amqp.FrameMethod, channel, 0)
	b = m.AppendTo(b)
	binary.BigEndian.PutUint32(b[start+3:], uint32(len(b)-start-amqp.FrameHeaderSize))
	return append(b, amqp.FrameEnd)
}
