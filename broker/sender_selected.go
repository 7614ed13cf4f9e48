package broker

import (
	"bytes"
	"encoding/binary"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/queue"
)

// Sender-selected distribution, as RabbitMQ: the CC and BCC headers (arrays
// of strings) of a published message are extra routing keys, routed
// alongside the publish's own key; the BCC header is removed before the
// message is enqueued, so no consumer sees it.

var (
	ccMark  = []byte("\x02CCA")
	bccMark = []byte("\x03BCCA")
	ccKey   = []byte("\x02CC")
	bccKey  = []byte("\x03BCC")
)

// checkSenderSelected refuses a publish whose CC or BCC header is not an
// array, as RabbitMQ does (rabbit_basic:header_routes): 406, naming the
// header and its field type. Without either key in the header it costs
// two byte scans.
func checkSenderSelected(header []byte) error {
	const flagsAt = 12
	if len(header) >= flagsAt+2 && binary.BigEndian.Uint16(header[flagsAt:])&amqp.FlagHeaders == 0 {
		return nil
	}
	if !bytes.Contains(header, ccKey) && !bytes.Contains(header, bccKey) {
		return nil
	}
	var h amqp.ContentHeader
	if err := amqp.DecodeContentHeader(header, &h); err != nil {
		return nil
	}
	for _, k := range [...]string{"CC", "BCC"} {
		v, ok := h.Properties.Headers[k]
		if _, arr := v.([]any); !ok || arr {
			continue
		}
		return amqp.Errorf(amqp.PreconditionFailed, amqp.ClassBasic, 40,
			"invalid message: {unacceptable_type_in_header,\"%s\",%s}", k, amqp.TypeName(v))
	}
	return nil
}

// senderSelected returns the CC and BCC routing keys of a content header
// payload, and the header with BCC removed (header itself when there is no
// BCC). A header without a headers table costs a look at its property
// flags, one with a table without either key two byte scans.
func senderSelected(header []byte) (keys []string, stripped []byte) {
	// class id, weight, body size, then the first property flags word.
	const flagsAt = 12
	if len(header) >= flagsAt+2 && binary.BigEndian.Uint16(header[flagsAt:])&amqp.FlagHeaders == 0 {
		return nil, header
	}
	hasCC, hasBCC := bytes.Contains(header, ccMark), bytes.Contains(header, bccMark)
	if !hasCC && !hasBCC {
		return nil, header
	}
	var h amqp.ContentHeader
	if err := amqp.DecodeContentHeader(header, &h); err != nil || h.Properties.Headers == nil {
		return nil, header
	}
	hdrs := h.Properties.Headers
	keys = appendKeys(keys, hdrs["CC"])
	bcc, ok := hdrs["BCC"]
	if !ok {
		return keys, header
	}
	keys = appendKeys(keys, bcc)
	delete(hdrs, "BCC")
	h.Properties.Flags = 0 // recompute: the headers table may now be empty
	if len(hdrs) == 0 {
		h.Properties.Headers = nil
	}
	out, err := h.AppendTo(nil)
	if err != nil {
		return keys, header
	}
	return keys, out
}

func appendKeys(keys []string, v any) []string {
	arr, _ := v.([]any)
	for _, k := range arr {
		switch k := k.(type) {
		case string:
			keys = append(keys, k)
		case []byte:
			keys = append(keys, string(k))
		}
	}
	return keys
}

// withHeader returns a copy of msg carrying header instead of its own.
func withHeader(msg *queue.Message, header []byte) *queue.Message {
	m := *msg
	m.Header = header
	return &m
}
