package amqp

import (
	"encoding/binary"
	"math"
)

// Property flag bits of class basic (0-9-1 §4.2.6.1): bit 15 is the first
// property, bit 0 says another flag word follows.
const (
	FlagContentType     uint16 = 1 << 15
	FlagContentEncoding uint16 = 1 << 14
	FlagHeaders         uint16 = 1 << 13
	FlagDeliveryMode    uint16 = 1 << 12
	FlagPriority        uint16 = 1 << 11
	FlagCorrelationID   uint16 = 1 << 10
	FlagReplyTo         uint16 = 1 << 9
	FlagExpiration      uint16 = 1 << 8
	FlagMessageID       uint16 = 1 << 7
	FlagTimestamp       uint16 = 1 << 6
	FlagType            uint16 = 1 << 5
	FlagUserID          uint16 = 1 << 4
	FlagAppID           uint16 = 1 << 3
	FlagClusterID       uint16 = 1 << 2
	FlagContinuation    uint16 = 1 << 0

	// propertyFlags are the bits that name a property of class basic.
	propertyFlags = 0xFFFC
)

// contentHeaderPrefix is class-id, weight and body-size: the part of a
// content header payload before the property flags (0-9-1 §4.2.6).
const contentHeaderPrefix = 12

// Properties are the 14 message properties of class basic.
//
// Flags says which properties are present. Decoding sets it (property bits
// only: continuation and reserved bits are cleared). Encoding writes the
// properties whose bits are set in Flags, or, when Flags is 0, those with a
// non-zero value (a non-nil Headers counts as non-zero even when empty).
type Properties struct {
	ContentType     string
	ContentEncoding string
	Headers         Table
	DeliveryMode    uint8 // 1 transient, 2 persistent
	Priority        uint8
	CorrelationID   string
	ReplyTo         string
	Expiration      string // per-message TTL in milliseconds, as decimal text
	MessageID       string
	Timestamp       uint64 // seconds since the Unix epoch
	Type            string
	UserID          string
	AppID           string
	ClusterID       string
	Flags           uint16
}

// presentFlags returns the flag word for the non-zero fields of p.
func (p *Properties) presentFlags() uint16 {
	var f uint16
	set := func(ok bool, bit uint16) {
		if ok {
			f |= bit
		}
	}
	set(p.ContentType != "", FlagContentType)
	set(p.ContentEncoding != "", FlagContentEncoding)
	set(p.Headers != nil, FlagHeaders)
	set(p.DeliveryMode != 0, FlagDeliveryMode)
	set(p.Priority != 0, FlagPriority)
	set(p.CorrelationID != "", FlagCorrelationID)
	set(p.ReplyTo != "", FlagReplyTo)
	set(p.Expiration != "", FlagExpiration)
	set(p.MessageID != "", FlagMessageID)
	set(p.Timestamp != 0, FlagTimestamp)
	set(p.Type != "", FlagType)
	set(p.UserID != "", FlagUserID)
	set(p.AppID != "", FlagAppID)
	set(p.ClusterID != "", FlagClusterID)
	return f
}

// AppendTo appends the property flags and property list to b. It fails,
// returning b unchanged, if a shortstr property is longer than 255 bytes or
// Headers cannot be encoded.
func (p *Properties) AppendTo(b []byte) ([]byte, error) {
	return appendProperties(b, p, true)
}

// appendProperties encodes p. With strict false it never fails: long
// shortstrs are truncated and unencodable header entries are left out.
func appendProperties(b []byte, p *Properties, strict bool) ([]byte, error) {
	if p == nil {
		return append(b, 0, 0), nil
	}
	start := len(b)
	flags := p.Flags & propertyFlags
	if p.Flags == 0 {
		flags = p.presentFlags()
	}
	b = appendUint16(b, flags)
	var err error
	str := func(bit uint16, s string) {
		if err != nil || flags&bit == 0 {
			return
		}
		if strict {
			b, err = appendShortstrStrict(b, s)
		} else {
			b = appendShortstr(b, s)
		}
	}
	str(FlagContentType, p.ContentType)
	str(FlagContentEncoding, p.ContentEncoding)
	if flags&FlagHeaders != 0 && err == nil {
		if strict {
			b, err = appendTable(b, p.Headers, 1)
		} else {
			b = appendTableLossy(b, p.Headers)
		}
	}
	if flags&FlagDeliveryMode != 0 {
		b = append(b, p.DeliveryMode)
	}
	if flags&FlagPriority != 0 {
		b = append(b, p.Priority)
	}
	str(FlagCorrelationID, p.CorrelationID)
	str(FlagReplyTo, p.ReplyTo)
	str(FlagExpiration, p.Expiration)
	str(FlagMessageID, p.MessageID)
	if flags&FlagTimestamp != 0 {
		b = appendUint64(b, p.Timestamp)
	}
	str(FlagType, p.Type)
	str(FlagUserID, p.UserID)
	str(FlagAppID, p.AppID)
	str(FlagClusterID, p.ClusterID)
	if err != nil {
		return b[:start], err
	}
	return b, nil
}

// DecodeProperties decodes property flags and property list from b into p,
// overwriting every field (absent properties become zero). Strings that are
// equal to the ones already in p are kept, so decoding into a reused
// Properties does not allocate for repeated values; nothing aliases b.
// Further flag words (continuation bit set) are accepted; the properties
// they would announce are not defined in 0-9-1 and are ignored. Malformed
// input yields a 501 FRAME_ERROR *Error.
func DecodeProperties(b []byte, p *Properties) error {
	return decodeProperties(b, p, 0)
}

// decodeProperties is DecodeProperties with the headers table nested at
// most maxDepth deep (0: MaxTableDepth).
func decodeProperties(b []byte, p *Properties, maxDepth int) error {
	d := decoder{b: b, maxDepth: maxDepth}
	flags := skipFlagWords(&d)
	p.Flags = flags
	str := func(bit uint16, dst *string) {
		if flags&bit != 0 {
			d.shortstr(dst)
		} else {
			*dst = ""
		}
	}
	str(FlagContentType, &p.ContentType)
	str(FlagContentEncoding, &p.ContentEncoding)
	if flags&FlagHeaders != 0 {
		d.table(&p.Headers)
	} else {
		p.Headers = nil
	}
	p.DeliveryMode, p.Priority = 0, 0
	if flags&FlagDeliveryMode != 0 {
		p.DeliveryMode = d.uint8()
	}
	if flags&FlagPriority != 0 {
		p.Priority = d.uint8()
	}
	str(FlagCorrelationID, &p.CorrelationID)
	str(FlagReplyTo, &p.ReplyTo)
	str(FlagExpiration, &p.Expiration)
	str(FlagMessageID, &p.MessageID)
	p.Timestamp = 0
	if flags&FlagTimestamp != 0 {
		p.Timestamp = d.uint64()
	}
	str(FlagType, &p.Type)
	str(FlagUserID, &p.UserID)
	str(FlagAppID, &p.AppID)
	str(FlagClusterID, &p.ClusterID)
	return d.propertiesResult()
}

// skipFlagWords reads the first property flag word and any continuation
// words after it, returning the property bits of the first.
func skipFlagWords(d *decoder) uint16 {
	flags := d.uint16()
	for w := flags; w&FlagContinuation != 0 && !d.bad; {
		w = d.uint16()
	}
	return flags & propertyFlags
}

func (d *decoder) propertiesResult() error {
	if d.err != nil {
		return d.err
	}
	if d.bad {
		return errFrame("content header: truncated properties")
	}
	return nil
}

// ContentHeader is the payload of a content header frame (0-9-1 §4.2.6).
type ContentHeader struct {
	ClassID    uint16
	Weight     uint16 // unused, must be 0
	BodySize   uint64
	Properties Properties
}

// AppendTo appends the header frame payload for h to b; errors as
// Properties.AppendTo.
func (h *ContentHeader) AppendTo(b []byte) ([]byte, error) {
	start := len(b)
	b = appendUint16(b, h.ClassID)
	b = appendUint16(b, h.Weight)
	b = appendUint64(b, h.BodySize)
	b, err := h.Properties.AppendTo(b)
	if err != nil {
		return b[:start], err
	}
	return b, nil
}

// DecodeContentHeader decodes a whole header frame payload into h,
// reusing h's strings as DecodeProperties does.
func DecodeContentHeader(payload []byte, h *ContentHeader) error {
	return decodeContentHeader(payload, h, 0)
}

// decodeContentHeader is DecodeContentHeader with the headers table nested
// at most maxDepth deep (0: MaxTableDepth).
func decodeContentHeader(payload []byte, h *ContentHeader, maxDepth int) error {
	classID, bodySize, err := ParseContentHeaderPrefix(payload)
	if err != nil {
		return err
	}
	h.ClassID = classID
	h.Weight = binary.BigEndian.Uint16(payload[2:])
	h.BodySize = bodySize
	return decodeProperties(payload[contentHeaderPrefix:], &h.Properties, maxDepth)
}

// ParseContentHeaderPrefix returns the class id and body size of a header
// frame payload without decoding the properties. It checks only that the
// payload is long enough to hold them and the first flag word.
func ParseContentHeaderPrefix(payload []byte) (classID uint16, bodySize uint64, err error) {
	if len(payload) < contentHeaderPrefix+2 {
		return 0, 0, errFrame("content header: %d bytes, need at least %d", len(payload), contentHeaderPrefix+2)
	}
	return binary.BigEndian.Uint16(payload), binary.BigEndian.Uint64(payload[4:]), nil
}

// PeekDeliveryModePriorityExpiration returns the delivery-mode, priority and
// expiration properties of a header frame payload (zero when absent). It
// decodes nothing else: shortstrs before them are skipped and the headers
// table is stepped over by its length without being decoded. Only the bytes
// it reads are checked, so DecodeContentHeader may still reject a payload
// this accepts. It allocates only for a non-empty expiration.
func PeekDeliveryModePriorityExpiration(payload []byte) (deliveryMode, priority uint8, expiration string, err error) {
	if _, _, err := ParseContentHeaderPrefix(payload); err != nil {
		return 0, 0, "", err
	}
	d := decoder{b: payload, off: contentHeaderPrefix}
	flags := skipFlagWords(&d)
	if flags&(FlagDeliveryMode|FlagPriority|FlagExpiration) == 0 {
		if d.bad {
			return 0, 0, "", errFrame("content header: truncated properties")
		}
		return 0, 0, "", nil
	}
	skip := func(bit uint16) {
		if flags&bit != 0 {
			d.bytes(uint64(d.uint8()))
		}
	}
	skipPropertiesBefore(&d, flags, FlagDeliveryMode)
	if flags&FlagDeliveryMode != 0 {
		deliveryMode = d.uint8()
	}
	if flags&FlagPriority != 0 {
		priority = d.uint8()
	}
	skip(FlagCorrelationID)
	skip(FlagReplyTo)
	if flags&FlagExpiration != 0 {
		expiration = string(d.bytes(uint64(d.uint8())))
	}
	if d.bad {
		return 0, 0, "", errFrame("content header: truncated properties")
	}
	return deliveryMode, priority, expiration, nil
}

// propertyOrder is the order of the properties in a content header, each
// with its encoding: 's' a shortstr, 't' a table, else its width in bytes.
var propertyOrder = [...]struct {
	bit  uint16
	kind byte
}{{FlagContentType, 's'}, {FlagContentEncoding, 's'}, {FlagHeaders, 't'}, {FlagDeliveryMode, 1},
	{FlagPriority, 1}, {FlagCorrelationID, 's'}, {FlagReplyTo, 's'}, {FlagExpiration, 's'},
	{FlagMessageID, 's'}, {FlagTimestamp, 8}, {FlagType, 's'}, {FlagUserID, 's'}, {FlagAppID, 's'},
	{FlagClusterID, 's'}}

// skipPropertiesBefore steps d over the properties flags has before the
// property bit, without decoding them (a table by its length).
func skipPropertiesBefore(d *decoder, flags, bit uint16) {
	for _, p := range propertyOrder {
		if p.bit == bit {
			return
		}
		if flags&p.bit == 0 {
			continue
		}
		switch p.kind {
		case 's':
			d.bytes(uint64(d.uint8()))
		case 't':
			d.bytes(uint64(d.uint32()))
		default:
			d.bytes(uint64(p.kind))
		}
	}
}

// PeekTimestamp returns the timestamp property of a header frame payload
// and whether it has one, stepping over the properties before it without
// decoding them (the headers table by its length). It allocates nothing.
func PeekTimestamp(payload []byte) (uint64, bool) {
	if _, _, err := ParseContentHeaderPrefix(payload); err != nil {
		return 0, false
	}
	d := decoder{b: payload, off: contentHeaderPrefix}
	flags := skipFlagWords(&d)
	if flags&FlagTimestamp == 0 {
		return 0, false
	}
	skipPropertiesBefore(&d, flags, FlagTimestamp)
	ts := d.uint64()
	if d.bad {
		return 0, false
	}
	return ts, true
}

// PeekHeader returns the value of the entry name of the headers table of a
// header frame payload, without decoding the table: typ is its type octet
// and raw its encoded bytes after it (for a longstr 'S' or byte array 'x',
// the content without the length). ok is false when the payload has no
// headers table or the table no such entry, or is malformed. raw aliases
// payload. It allocates nothing.
func PeekHeader(payload []byte, name string) (typ byte, raw []byte, ok bool) {
	if _, _, err := ParseContentHeaderPrefix(payload); err != nil {
		return 0, nil, false
	}
	d := decoder{b: payload, off: contentHeaderPrefix}
	flags := skipFlagWords(&d)
	if flags&FlagHeaders == 0 {
		return 0, nil, false
	}
	skipPropertiesBefore(&d, flags, FlagHeaders)
	t := d.bytes(uint64(d.uint32()))
	if d.bad {
		return 0, nil, false
	}
	for len(t) > 0 {
		kl := int(t[0])
		if len(t) < 1+kl+1 {
			return 0, nil, false
		}
		key := t[1 : 1+kl]
		t = t[1+kl:]
		n := valueLen(t)
		if n <= 0 || n > len(t) {
			return 0, nil, false
		}
		if string(key) == name {
			typ, raw = t[0], t[1:n]
			if typ == 'S' || typ == 'x' {
				raw = raw[4:]
			}
			return typ, raw, true
		}
		t = t[n:]
	}
	return 0, nil, false
}

// AppendHeaderInt64 appends to dst payload, a header frame payload, with
// the entry name set to the long-long integer v ('l') in its headers table:
// added at the table's end, or in a new table when it has none. It does not
// decode the table (only the entries are stepped over, looking for name),
// and reports false, appending nothing, when the table has name already or
// the payload is malformed; the caller decodes it then.
func AppendHeaderInt64(dst, payload []byte, name string, v int64) ([]byte, bool) {
	if len(name) > 255 {
		return dst, false
	}
	if _, _, err := ParseContentHeaderPrefix(payload); err != nil {
		return dst, false
	}
	d := decoder{b: payload, off: contentHeaderPrefix}
	flags := skipFlagWords(&d)
	skipPropertiesBefore(&d, flags, FlagHeaders)
	if d.bad {
		return dst, false
	}
	at := d.off
	var table []byte
	rest := at
	if flags&FlagHeaders != 0 {
		table = d.bytes(uint64(d.uint32()))
		if d.bad {
			return dst, false
		}
		rest = d.off
		for t := table; len(t) > 0; {
			kl := int(t[0])
			if len(t) < 1+kl+1 {
				return dst, false
			}
			key := t[1 : 1+kl]
			t = t[1+kl:]
			n := valueLen(t)
			if n <= 0 || n > len(t) || string(key) == name {
				return dst, false
			}
			t = t[n:]
		}
	}
	entry := 1 + len(name) + 9
	if uint64(len(table))+uint64(entry) > math.MaxUint32 {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, payload[:at]...)
	// The headers bit of the first flag word.
	dst[start+contentHeaderPrefix] |= byte(FlagHeaders >> 8)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(table)+entry))
	dst = append(dst, table...)
	dst = append(dst, byte(len(name)))
	dst = append(dst, name...)
	dst = append(dst, 'l')
	dst = binary.BigEndian.AppendUint64(dst, uint64(v))
	return append(dst, payload[rest:]...), true
}

// valueLen is the encoded length of the typed value at the start of b
// (type octet included), 0 when it is unknown or truncated.
func valueLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch b[0] {
	case 't', 'b', 'B':
		return 2
	case 's', 'u':
		return 3
	case 'I', 'i', 'f':
		return 5
	case 'l', 'd', 'T':
		return 9
	case 'D':
		return 6
	case 'V':
		return 1
	case 'S', 'x', 'F', 'A':
		if len(b) < 5 {
			return 0
		}
		return 5 + int(binary.BigEndian.Uint32(b[1:]))
	}
	return 0
}
