// Package amqp converts between AMQP 0-9-1 bytes and Go values: frames,
// the methods of the spec (with RabbitMQ's extensions), field tables, the
// content header with the 14 properties of class basic, reply codes and
// *Error, the exception that becomes a channel.close (soft) or a
// connection.close (hard).
//
// It does no I/O of its own beyond reading through the io.Reader given to
// a FrameReader, owns no goroutines and does not log. It depends only on
// the standard library.
//
// # Encoding
//
// Encoders append to a caller's buffer (AppendFrame, AppendMethodFrame,
// Method.AppendTo, Table.AppendTo, ...) and allocate only when the buffer
// must grow. Encoders without an error result never fail and never produce
// a malformed frame: they truncate shortstrs to 255 bytes and leave out
// table entries that cannot be encoded. The ones with an error result
// (Table.AppendTo, Properties.AppendTo) report those cases instead.
//
// # Decoding and borrowed bytes
//
// Decoders work on a bounded []byte, check every length against the bytes
// that remain before using it, never panic and report malformed input as a
// 501 FRAME_ERROR *Error (540 NOT_IMPLEMENTED for an unknown method).
//
// A Frame's Payload is borrowed from the FrameReader's buffer and is valid
// only until the next ReadFrame. Decoded methods, tables and properties
// never alias their input: strings and byte arrays are copied, so they stay
// valid after the payload is gone. A value returned by MethodDecoder.Decode
// is itself reused: it is valid until the next Decode of the same method
// type.
//
// The method structs are generated from RabbitMQ's amqp-rabbitmq-0.9.1.json,
// kept in internal/gen with its licence notice.
package amqp

//go:generate go run ./internal/gen -spec internal/gen/amqp-rabbitmq-0.9.1.json -out methods_gen.go
