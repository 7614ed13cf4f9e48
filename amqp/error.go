package amqp

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Error is an AMQP exception: what goes into a channel.close (soft error) or
// a connection.close (hard error). Every protocol failure this package
// detects while decoding is returned as an *Error.
type Error struct {
	Code     uint16 // reply code, e.g. NotFound
	Text     string // reply text, at most 255 bytes, e.g. "NOT_FOUND - no queue 'q' in vhost '/'"
	ClassID  uint16 // class of the method that caused it, 0 if none
	MethodID uint16 // method that caused it, 0 if none
}

// Error implements error: "amqp 404: NOT_FOUND - no queue 'q' (queue.declare)".
func (e *Error) Error() string {
	s := "amqp " + strconv.Itoa(int(e.Code)) + ": " + e.Text
	if e.ClassID != 0 || e.MethodID != 0 {
		s += " (" + MethodName(e.ClassID, e.MethodID) + ")"
	}
	return s
}

// Hard reports whether the error is a connection exception (answered with
// connection.close) rather than a channel exception (channel.close). The
// classification is the spec's: soft-error codes are 311, 312, 313, 403, 404,
// 405 and 406; every other code, including unknown ones, is treated as hard.
func (e *Error) Hard() bool { return !softReply(e.Code) }

// Errorf returns an *Error whose Text is "<REPLY_TEXT> - <formatted>" as
// RabbitMQ writes it, e.g. Errorf(NotFound, ClassQueue, 10, "no queue '%s' in
// vhost '%s'", q, vh).Text == "NOT_FOUND - no queue 'q' in vhost '/'".
// Text is truncated to 255 bytes (it travels as a shortstr), on a UTF-8
// boundary.
func Errorf(code uint16, classID, methodID uint16, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if rt := ReplyText(code); rt != "" {
		msg = rt + " - " + msg
	}
	return &Error{Code: code, Text: truncateShortstr(msg), ClassID: classID, MethodID: methodID}
}

// ConnectionClose returns the connection.close that reports e.
func (e *Error) ConnectionClose() *ConnectionClose {
	return &ConnectionClose{ReplyCode: e.Code, ReplyText: truncateShortstr(e.Text), FailingClassID: e.ClassID, FailingMethodID: e.MethodID}
}

// ChannelClose returns the channel.close that reports e.
func (e *Error) ChannelClose() *ChannelClose {
	return &ChannelClose{ReplyCode: e.Code, ReplyText: truncateShortstr(e.Text), FailingClassID: e.ClassID, FailingMethodID: e.MethodID}
}

// Err returns the close reason as an *Error.
func (m *ConnectionClose) Err() *Error {
	return &Error{Code: m.ReplyCode, Text: m.ReplyText, ClassID: m.FailingClassID, MethodID: m.FailingMethodID}
}

// Err returns the close reason as an *Error.
func (m *ChannelClose) Err() *Error {
	return &Error{Code: m.ReplyCode, Text: m.ReplyText, ClassID: m.FailingClassID, MethodID: m.FailingMethodID}
}

// truncateShortstr cuts s to at most MaxShortstrLen bytes without splitting
// a UTF-8 sequence.
func truncateShortstr(s string) string {
	if len(s) <= MaxShortstrLen {
		return s
	}
	n := MaxShortstrLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Encoding errors. They report values the caller built that the wire
// format cannot carry; they are not protocol errors and are wrapped with
// details (test with errors.Is).
var (
	// ErrShortstrTooLong: a shortstr (names, routing keys, most properties,
	// table keys) is longer than 255 bytes.
	ErrShortstrTooLong = errors.New("amqp: shortstr longer than 255 bytes")
	// ErrUnsupportedValue: a field table holds a Go value with no AMQP type.
	ErrUnsupportedValue = errors.New("amqp: unsupported field table value")
	// ErrTableTooDeep: field tables/arrays nest deeper than MaxTableDepth.
	ErrTableTooDeep = errors.New("amqp: field table nesting too deep")
	// ErrTooLarge: a table, array or longstr exceeds 4 GiB - 1 bytes.
	ErrTooLarge = errors.New("amqp: value too large for a 32-bit length")
)

func errShortstrTooLong(n int) error {
	return fmt.Errorf("%w: %d bytes", ErrShortstrTooLong, n)
}

func errFrame(format string, args ...any) *Error {
	return Errorf(FrameError, 0, 0, format, args...)
}
