package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// The encoding of a definition command:
//
//	version(1) = 1 | op(1) | present (uvarint, bit i = field i is set) | fields
//
// Fields follow in the order of defCmd.fields, only those present: a string
// or byte slice as uvarint length and bytes, an id as uvarint, Priority as
// varint, Tags as uvarint count and strings; a flag is its bit alone. The
// field order is part of the encoding: append new fields, never reorder.

const defCmdVersion = 1

// errDefCmd means a command's encoding is malformed.
var errDefCmd = errors.New("broker: malformed definition command")

// fields returns pointers to c's fields in encoding order.
func (c *defCmd) fields() [32]any {
	return [...]any{
		&c.VHost, &c.VHostID, &c.Name, &c.Type, &c.Durable, &c.AutoDelete, &c.Internal, &c.Exclusive,
		&c.Args, &c.Owner, &c.ID, &c.IfUnused, &c.Force, &c.Source, &c.Dest, &c.ToExchange,
		&c.Key, &c.User, &c.Hash, &c.HashAlgorithm, &c.Tags, &c.Configure, &c.Write, &c.Read,
		&c.Exchange, &c.Pattern, &c.ApplyTo, &c.Priority, &c.Definition, &c.Operator, &c.Value,
		&c.Node,
	}
}

// appendTo appends c's encoding to b.
func (c *defCmd) appendTo(b []byte) []byte {
	fs := c.fields()
	var present uint64
	for i, f := range fs {
		set := false
		switch p := f.(type) {
		case *string:
			set = *p != ""
		case *uint64:
			set = *p != 0
		case *bool:
			set = *p
		case *[]byte:
			set = len(*p) > 0
		case *[]string:
			set = len(*p) > 0
		case *int:
			set = *p != 0
		}
		if set {
			present |= 1 << i
		}
	}
	b = append(b, defCmdVersion, byte(c.Op))
	b = binary.AppendUvarint(b, present)
	for m := present; m != 0; m &= m - 1 {
		switch p := fs[bits.TrailingZeros64(m)].(type) {
		case *string:
			b = appendBytes(b, *p)
		case *uint64:
			b = binary.AppendUvarint(b, *p)
		case *[]byte:
			b = appendBytes(b, *p)
		case *[]string:
			b = binary.AppendUvarint(b, uint64(len(*p)))
			for _, s := range *p {
				b = appendBytes(b, s)
			}
		case *int:
			b = binary.AppendVarint(b, int64(*p))
		}
	}
	return b
}

func appendBytes[T string | []byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decodeDefCmd reads a command encoded by defCmd.encode. The command
// shares no memory with b.
func decodeDefCmd(b []byte) (*defCmd, error) {
	if len(b) < 2 || b[0] != defCmdVersion {
		return nil, fmt.Errorf("%w: version or length", errDefCmd)
	}
	c := &defCmd{Op: defOp(b[1])}
	if c.Op == 0 || c.Op >= opEnd {
		return nil, fmt.Errorf("%w: unknown %s", errDefCmd, c.Op)
	}
	d := cmdDecoder{b: b[2:]}
	present := d.uvarint()
	fs := c.fields()
	if present>>len(fs) != 0 {
		return nil, fmt.Errorf("%w: unknown fields %#x", errDefCmd, present)
	}
	for m := present; m != 0 && d.err == nil; m &= m - 1 {
		switch p := fs[bits.TrailingZeros64(m)].(type) {
		case *string:
			*p = string(d.bytes())
		case *uint64:
			*p = d.uvarint()
		case *bool:
			*p = true
		case *[]byte:
			*p = append([]byte(nil), d.bytes()...)
		case *[]string:
			n := d.uvarint()
			if n > uint64(len(d.b)) {
				d.err = errDefCmd
				break
			}
			*p = make([]string, n)
			for i := range *p {
				(*p)[i] = string(d.bytes())
			}
		case *int:
			v, n := binary.Varint(d.b)
			if n <= 0 {
				d.err = errDefCmd
				break
			}
			d.b = d.b[n:]
			*p = int(v)
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%w: %d bytes left over", errDefCmd, len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("decoding %s: %w", c.Op, d.err)
	}
	return c, nil
}

// cmdDecoder reads uvarints and length-prefixed bytes from b; the first
// failure sticks in err.
type cmdDecoder struct {
	b   []byte
	err error
}

func (d *cmdDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errDefCmd
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes returns the next length-prefixed bytes, borrowed from d.b.
func (d *cmdDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errDefCmd
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}
