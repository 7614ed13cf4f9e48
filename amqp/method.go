package amqp

import (
	"encoding/binary"
	"strconv"
)

// Method is one AMQP method: a generated struct per method of the spec
// (ConnectionStart, BasicPublish, ...), always used by pointer.
type Method interface {
	ClassID() uint16
	MethodID() uint16
	Name() string      // "basic.publish"
	HasContent() bool  // a content header and body follow (publish, return, deliver, get-ok)
	Synchronous() bool // the spec's "synchronous": the peer answers it

	// AppendTo appends class id, method id and the arguments to b; bits
	// are packed as the spec says (consecutive bits share an octet, least
	// significant first). It never fails: shortstrs longer than 255 bytes
	// are truncated to 255 bytes and table entries that cannot be encoded
	// (see Table.Validate) are left out, so the frame stays well-formed.
	AppendTo(b []byte) []byte

	// Decode decodes the arguments in payload, the method frame payload
	// after its four octets of ids, overwriting every field. Missing bytes
	// are a 501 FRAME_ERROR *Error; trailing bytes are ignored (as RabbitMQ
	// does). The method never retains payload: strings and tables are
	// copies. A string field already equal to the decoded value is kept
	// rather than copied again, which makes reused values cheap.
	Decode(payload []byte) error
}

// MethodName returns "class.method" for a class and method id
// ("basic.publish"), or "method <class>.<method>" for unknown ids.
func MethodName(classID, methodID uint16) string {
	if s := methodName(classID, methodID); s != "" {
		return s
	}
	return "method " + strconv.Itoa(int(classID)) + "." + strconv.Itoa(int(methodID))
}

// methodIDs splits the ids off a method frame payload.
func methodIDs(payload []byte) (classID, methodID uint16, err error) {
	if len(payload) < 4 {
		return 0, 0, errFrame("method frame payload of %d bytes has no method id", len(payload))
	}
	return binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]), nil
}

func errUnknownMethod(classID, methodID uint16) *Error {
	return Errorf(NotImplemented, classID, methodID, "unknown method class %d method %d", classID, methodID)
}

// DecodeMethod decodes a whole method frame payload (ids included) into a
// newly allocated value. Unknown ids are a 540 NOT_IMPLEMENTED *Error,
// malformed arguments a 501 FRAME_ERROR *Error.
func DecodeMethod(payload []byte) (Method, error) {
	classID, methodID, err := methodIDs(payload)
	if err != nil {
		return nil, err
	}
	m := newMethod(classID, methodID)
	if m == nil {
		return nil, errUnknownMethod(classID, methodID)
	}
	if err := m.Decode(payload[4:]); err != nil {
		return nil, err
	}
	return m, nil
}

// MethodDecoder decodes methods into values it keeps, one per method type,
// so that decoding allocates only for strings and tables that change. Its
// zero value is ready to use; it is used by one goroutine (a connection's
// reader).
type MethodDecoder struct {
	// MaxTableDepth bounds the nesting of the field tables and arrays
	// decoded by Decode and DecodeContentHeader (the outermost table is
	// depth 1): deeper input is a 501 FRAME_ERROR. 0, or a value above
	// MaxTableDepth, means MaxTableDepth. Set it before the first Decode.
	MaxTableDepth int

	v methodValues
}

// depthDecoder is implemented by the generated methods with field-table
// arguments: Decode with a nesting limit (0: MaxTableDepth).
type depthDecoder interface {
	decodeDepth(p []byte, maxDepth int) error
}

// Decode is DecodeMethod without the allocation of the value: it returns a
// pointer into d, valid until the next Decode of the same method type (the
// strings and tables in it may be kept for longer: they are never
// overwritten in place).
func (d *MethodDecoder) Decode(payload []byte) (Method, error) {
	classID, methodID, err := methodIDs(payload)
	if err != nil {
		return nil, err
	}
	m := d.v.get(classID, methodID)
	if m == nil {
		return nil, errUnknownMethod(classID, methodID)
	}
	if err := d.decode(m, payload[4:]); err != nil {
		return nil, err
	}
	return m, nil
}

// decode decodes the arguments of m under d's table nesting limit; with the
// default limit it is m.Decode, with no type assertion per method.
func (d *MethodDecoder) decode(m Method, args []byte) error {
	if tableDepthLimit(d.MaxTableDepth) < MaxTableDepth {
		if dd, ok := m.(depthDecoder); ok {
			return dd.decodeDepth(args, d.MaxTableDepth)
		}
	}
	return m.Decode(args)
}

// DecodeContentHeader is the package's DecodeContentHeader with the
// headers table under d's nesting limit (MaxTableDepth). It uses nothing
// else of d, so it may run on any goroutine.
func (d *MethodDecoder) DecodeContentHeader(payload []byte, h *ContentHeader) error {
	return decodeContentHeader(payload, h, d.MaxTableDepth)
}
