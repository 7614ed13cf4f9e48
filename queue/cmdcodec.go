package queue

import (
	"encoding/binary"
	"errors"
)

// The command encoding: a Cmd as bytes, for a replicated log (a quorum
// queue's data group appends them to its Raft log). AppendCmd writes every
// field an Op uses, and only those; DecodeCmd reads it back into a Cmd
// that owns its bytes (the message's header and body are copied out of
// the input). Integers are varints:
//
//	version(1) op(1) now(varint)
//	enqueue     ttl publisher pubseq exchange rkey header body
//	            flags(1: persistent 1, report enqueued 2) priority(1)
//	attach      consumer tag prefetch priority flags(1: noack 1, exclusive 2)
//	detach      consumer
//	get         flags(1: noack 1, holder follows 2) [holder]
//	settle, return, discard, settle-discards
//	            count ids... (count 0: one id follows, Cmd.Seq), then
//	            with version 2 the holder (Cmd.Consumer)
//	purge       max
//	setconfig   the configuration as in a snapshot
//	forget      publisher
//	checkout, tick, touch: nothing more

// ErrBadCommand means DecodeCmd was given bytes that are not a command of
// this encoding.
var ErrBadCommand = errors.New("queue: bad command encoding")

// cmdVersion is the encoding's version; cmdVersionHolder (2) marks a
// settle, return or discard that names its holder.
const (
	cmdVersion       = 1
	cmdVersionHolder = 2
)

// AppendCmd appends cmd's encoding to b.
func AppendCmd(b []byte, cmd *Cmd) []byte {
	version := byte(cmdVersion)
	holder := cmd.Consumer != 0 && (cmd.Op == OpSettle || cmd.Op == OpReturn || cmd.Op == OpDiscard)
	if holder {
		version = cmdVersionHolder
	}
	b = append(b, version, byte(cmd.Op))
	b = binary.AppendVarint(b, cmd.Now)
	switch cmd.Op {
	case OpEnqueue:
		b = binary.AppendVarint(b, cmd.TTL)
		b = binary.AppendUvarint(b, uint64(cmd.Publisher))
		b = binary.AppendUvarint(b, cmd.PubSeq)
		m := cmd.Msg
		if m == nil {
			m = &Message{}
		}
		b = appendString(b, m.Exchange)
		b = appendString(b, m.RoutingKey)
		b = binary.AppendUvarint(b, uint64(len(m.Header)))
		b = append(b, m.Header...)
		b = binary.AppendUvarint(b, uint64(len(m.Body)))
		b = append(b, m.Body...)
		b = append(b, boolByte(m.Persistent)|boolByte(cmd.ReportEnqueued)<<1, m.Priority)
	case OpAttach:
		b = binary.AppendUvarint(b, uint64(cmd.Consumer))
		b = appendString(b, cmd.Tag)
		b = binary.AppendVarint(b, int64(cmd.Prefetch))
		b = binary.AppendVarint(b, int64(cmd.Priority))
		b = append(b, boolByte(cmd.NoAck)|boolByte(cmd.Exclusive)<<1)
	case OpDetach:
		b = binary.AppendUvarint(b, uint64(cmd.Consumer))
	case OpGet:
		if cmd.Consumer == 0 {
			b = append(b, boolByte(cmd.NoAck))
			break
		}
		b = append(b, boolByte(cmd.NoAck)|2)
		b = binary.AppendUvarint(b, uint64(cmd.Consumer))
	case OpSettle, OpReturn, OpDiscard, OpSettleDiscards:
		if len(cmd.Seqs) == 0 {
			b = append(b, 0)
			b = binary.AppendUvarint(b, cmd.Seq)
			if holder {
				b = binary.AppendUvarint(b, uint64(cmd.Consumer))
			}
			break
		}
		b = binary.AppendUvarint(b, uint64(len(cmd.Seqs)))
		for _, s := range cmd.Seqs {
			b = binary.AppendUvarint(b, s)
		}
		if holder {
			b = binary.AppendUvarint(b, uint64(cmd.Consumer))
		}
	case OpPurge:
		b = binary.AppendUvarint(b, uint64(max(cmd.Max, 0)))
	case OpSetConfig:
		b = appendConfig(b, &cmd.Config)
	case OpForget:
		b = binary.AppendUvarint(b, uint64(cmd.Publisher))
	}
	return b
}

// DecodeCmd decodes a command AppendCmd wrote. The result owns its bytes.
func DecodeCmd(b []byte) (Cmd, error) {
	r := snapReader{b: b}
	version := r.byte()
	if version != cmdVersion && version != cmdVersionHolder {
		return Cmd{}, ErrBadCommand
	}
	cmd := Cmd{Op: Op(r.byte()), Now: r.varint()}
	if version == cmdVersionHolder && cmd.Op != OpSettle && cmd.Op != OpReturn && cmd.Op != OpDiscard {
		return Cmd{}, ErrBadCommand
	}
	switch cmd.Op {
	case OpEnqueue:
		cmd.TTL = r.varint()
		cmd.Publisher = PublisherID(r.uvarint())
		cmd.PubSeq = r.uvarint()
		m := &Message{Exchange: r.string(), RoutingKey: r.string()}
		hdr, body := r.count(), 0
		if r.err == nil {
			// Header and body share one allocation, as a message read
			// from the wire does.
			rest := r.b[hdr:]
			n, k := binary.Uvarint(rest)
			if k <= 0 || n > uint64(len(rest)-k) {
				r.fail()
				break
			}
			body = int(n)
			buf := make([]byte, hdr+body)
			copy(buf, r.b[:hdr])
			copy(buf[hdr:], rest[k:k+body])
			m.Header, m.Body = buf[:hdr:hdr], buf[hdr:]
			r.b = rest[k+body:]
		}
		f := r.byte()
		m.Persistent, cmd.ReportEnqueued = f&1 != 0, f&2 != 0
		m.Priority = r.byte()
		cmd.Msg = m
	case OpAttach:
		cmd.Consumer = ConsumerID(r.uvarint())
		cmd.Tag = r.string()
		cmd.Prefetch = int(r.varint())
		cmd.Priority = int(r.varint())
		f := r.byte()
		cmd.NoAck, cmd.Exclusive = f&1 != 0, f&2 != 0
	case OpDetach:
		cmd.Consumer = ConsumerID(r.uvarint())
	case OpGet:
		f := r.byte()
		cmd.NoAck = f&1 != 0
		if f&2 != 0 {
			cmd.Consumer = ConsumerID(r.uvarint())
		}
	case OpSettle, OpReturn, OpDiscard, OpSettleDiscards:
		n := r.count()
		if n == 0 {
			cmd.Seq = r.uvarint()
		} else {
			cmd.Seqs = make([]uint64, 0, n)
			for range n {
				cmd.Seqs = append(cmd.Seqs, r.uvarint())
			}
		}
		if version == cmdVersionHolder {
			cmd.Consumer = ConsumerID(r.uvarint())
		}
	case OpPurge:
		cmd.Max = int(r.uvarint())
	case OpSetConfig:
		cmd.Config = readConfig(&r)
	case OpForget:
		cmd.Publisher = PublisherID(r.uvarint())
	case OpCheckout, OpTick, OpTouch:
	default:
		return Cmd{}, ErrBadCommand
	}
	if r.err != nil || len(r.b) != 0 {
		return Cmd{}, ErrBadCommand
	}
	return cmd, nil
}

// appendConfig appends c as a snapshot records it.
func appendConfig(b []byte, c *Config) []byte {
	b = binary.AppendVarint(b, c.MessageTTL)
	b = binary.AppendVarint(b, c.MaxLength)
	b = binary.AppendVarint(b, c.MaxLengthBytes)
	b = append(b, byte(c.Overflow), c.MaxPriority, boolByte(c.SingleActiveConsumer), boolByte(c.DeadLetter))
	b = binary.AppendVarint(b, c.DeliveryLimit)
	b = binary.AppendVarint(b, c.Expires)
	b = appendString(b, c.GroupHeader)
	if c.DedupSize > 0 {
		// Optional, last: configurations written before deduplication
		// was replicated end with the group header.
		b = append(b, configDedup)
		b = binary.AppendUvarint(b, uint64(c.DedupSize))
		b = binary.AppendVarint(b, c.DedupTTL)
	}
	if c.DeadLetterAtLeastOnce {
		b = append(b, configAtLeastOnce)
	}
	return b
}

// configDedup marks the deduplication bounds at the end of a
// configuration, configAtLeastOnce (after them) x-dead-letter-strategy
// at-least-once.
const (
	configDedup       = 'd'
	configAtLeastOnce = 'a'
)

func readConfig(r *snapReader) Config {
	c := Config{MessageTTL: r.varint(), MaxLength: r.varint(), MaxLengthBytes: r.varint()}
	c.Overflow, c.MaxPriority = Overflow(r.byte()), r.byte()
	c.SingleActiveConsumer, c.DeadLetter = r.bool(), r.bool()
	c.DeliveryLimit = r.varint()
	c.Expires = r.varint()
	c.GroupHeader = r.string()
	if len(r.b) > 0 && r.b[0] == configDedup {
		r.byte()
		c.DedupSize, c.DedupTTL = int(r.uvarint()), r.varint()
	}
	if len(r.b) > 0 && r.b[0] == configAtLeastOnce {
		r.byte()
		c.DeadLetterAtLeastOnce = true
	}
	return c
}

// AppendConfig appends the encoding of c (as in a snapshot, and in an
// OpSetConfig command) to b; DecodeConfig reads it back.
func AppendConfig(b []byte, c *Config) []byte { return appendConfig(b, c) }

// DecodeConfig decodes a configuration AppendConfig wrote.
func DecodeConfig(b []byte) (Config, error) {
	r := snapReader{b: b}
	c := readConfig(&r)
	if r.err != nil || len(r.b) != 0 {
		return Config{}, ErrBadCommand
	}
	return c, nil
}
