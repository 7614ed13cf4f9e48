package queue

// slot is an Entry as the queue holds it outside the ready list (requeued,
// unacknowledged, discarded; the ready list packs it further into a cell):
// four words, so that it stays dense (an Entry has more fields and is
// copied through memory, which made publish→deliver several times
// slower). meta packs the delivery count (saturating at 2^20-1), the
// redelivered flag and the expiry in unix ms (below 2^43, the year 2248;
// larger values are clamped). A slot whose message is paged out
// (paging.go) has a nil msg and keeps everything else.
type slot struct {
	msg   *Message // nil while paged out
	seq   uint64
	meta  uint64 // expires<<expiresShift | redelivered<<20 | deliveries
	size  uint32 // body bytes
	flags uint32 // flagSpilled
}

// flagSpilled marks a message the owner wrote to its paging store to page
// it out (a transient message, or one of a non-durable queue): that copy
// goes when the message is settled (Entry.Spilled).
const flagSpilled = 1

const (
	deliveriesMask = 1<<20 - 1
	redeliveredBit = 1 << 20
	expiresShift   = 21
	maxExpires     = 1<<(64-expiresShift) - 1
)

func toSlot(e Entry) slot {
	s := slot{msg: e.Msg, seq: e.Seq, meta: uint64(min(e.Deliveries, deliveriesMask)), size: uint32(e.Size)}
	if e.Msg != nil {
		s.size = uint32(e.Msg.Size())
	}
	if e.Spilled {
		s.flags = flagSpilled
	}
	if e.Redelivered {
		s.meta |= redeliveredBit
	}
	s.setExpires(e.Expires)
	return s
}

func (s slot) entry() Entry {
	return Entry{
		Msg:         s.msg,
		Seq:         s.seq,
		Redelivered: s.meta&redeliveredBit != 0,
		Deliveries:  uint32(s.meta & deliveriesMask),
		Expires:     s.expires(),
		Spilled:     s.flags&flagSpilled != 0,
		Size:        int(s.size),
	}
}

// fill writes the entry of s into *e, field by field (no Entry value is
// built and copied).
func (s *slot) fill(e *Entry) {
	e.Msg = s.msg
	e.Seq = s.seq
	e.Redelivered = s.meta&redeliveredBit != 0
	e.Deliveries = uint32(s.meta & deliveriesMask)
	e.Expires = s.expires()
	e.Spilled = s.flags&flagSpilled != 0
	e.Size = int(s.size)
}

func (s slot) expires() int64 { return int64(s.meta >> expiresShift) }

func (s *slot) setExpires(x int64) {
	x = max(0, min(x, maxExpires))
	s.meta = s.meta&(1<<expiresShift-1) | uint64(x)<<expiresShift
}

// delivered counts one more delivery.
func (s *slot) delivered() {
	if s.meta&deliveriesMask != deliveriesMask {
		s.meta++
	}
}

// expired reports whether s has expired at now.
func (s *slot) expired(now int64) bool {
	x := s.expires()
	return x != 0 && x <= now
}

// cell is a slot as the ready ring holds it: 24 bytes, so that a deep
// queue's index costs 24 bytes a message (a slot is 32). The ring keeps
// the seqs as 32-bit offsets from its base, and the flags in meta, whose
// delivery count has 18 bits (saturating at 2^18-1; ready messages are
// mostly new, with no delivery yet). A cell whose message is paged out
// (paging.go) has a nil msg and keeps everything else.
type cell struct {
	msg  *Message // nil while paged out, or taken (groups.go)
	meta uint64   // expires<<expiresShift | redelivered<<20 | taken<<19 | spilled<<18 | deliveries
	off  uint32   // seq - ring.base (unless the ring is wide)
	size uint32   // body bytes
}

const (
	cellDeliveriesMask = 1<<18 - 1
	cellSpilledBit     = 1 << 18
	cellTakenBit       = 1 << 19
)

// cellOf packs s with offset off.
func cellOf(s *slot, off uint32) cell {
	meta := s.meta&^deliveriesMask | min(s.meta&deliveriesMask, cellDeliveriesMask)
	if s.flags&flagSpilled != 0 {
		meta |= cellSpilledBit
	}
	if s.flags&flagTaken != 0 {
		meta |= cellTakenBit
	}
	return cell{msg: s.msg, meta: meta, off: off, size: s.size}
}

// slot unpacks c, whose seq is seq.
func (c *cell) slot(seq uint64) slot {
	var s slot
	c.unpack(&s, seq)
	return s
}

// unpack writes c, whose seq is seq, into *s field by field.
func (c *cell) unpack(s *slot, seq uint64) {
	s.msg = c.msg
	s.seq = seq
	s.meta = c.meta &^ (cellSpilledBit | cellTakenBit)
	s.size = c.size
	s.flags = uint32(c.meta>>18) & 1 * flagSpilled
	if c.meta&cellTakenBit != 0 {
		s.flags |= flagTaken
	}
}

// delivered counts one more delivery.
func (c *cell) delivered() {
	if c.meta&cellDeliveriesMask != cellDeliveriesMask {
		c.meta++
	}
}

func (c *cell) expires() int64 { return int64(c.meta >> expiresShift) }

// expired reports whether c has expired at now.
func (c *cell) expired(now int64) bool {
	x := c.expires()
	return x != 0 && x <= now
}

func (c *cell) spilled() bool { return c.meta&cellSpilledBit != 0 }

func (c *cell) setSpilled() { c.meta |= cellSpilledBit }

func (c *cell) taken() bool { return c.meta&cellTakenBit != 0 }

func (c *cell) setTaken() { c.meta |= cellTakenBit }

// ring is a growable FIFO of cells in seq order, used for the ready list.
// A cell's seq is base plus its offset; a push whose seq is 2^32 or more
// past base moves base up to the front's seq (rewriting the offsets, once
// per 2^32 publishes at most). Only when the front itself is that far
// behind (a message left at the head while 2^32 newer ones came and went)
// does the ring go wide: it keeps every seq in full in wide, beside buf,
// until it drains.
type ring struct {
	buf  []cell
	head int
	n    int
	base uint64
	wide []uint64 // nil unless wide; else wide[j] is the seq of buf[j]
}

func (r *ring) len() int { return r.n }

func (r *ring) push(s slot) {
	if r.n == len(r.buf) {
		r.grow()
	}
	if r.n == 0 && r.wide == nil {
		r.base = s.seq
	}
	if r.wide == nil && (s.seq < r.base || s.seq-r.base > maxOff) {
		r.rebase(s.seq)
	}
	j := (r.head + r.n) & (len(r.buf) - 1)
	r.buf[j] = cellOf(&s, uint32(s.seq-r.base))
	if r.wide != nil {
		r.wide[j] = s.seq
	}
	r.n++
}

const maxOff = 1<<32 - 1

// rebase makes room for seq: base becomes the least of seq and the
// front's seq, or the ring goes wide if its seqs and seq span more than
// 32 bits.
func (r *ring) rebase(seq uint64) {
	lo, hi := seq, seq
	if r.n > 0 {
		lo, hi = min(lo, r.seqAt(0)), max(hi, r.seqAt(r.n-1))
	}
	if hi-lo > maxOff {
		wide := make([]uint64, len(r.buf))
		for i := 0; i < r.n; i++ {
			wide[(r.head+i)&(len(r.buf)-1)] = r.seqAt(i)
		}
		r.wide = wide
		return
	}
	for i := 0; i < r.n; i++ {
		c := r.at(i)
		c.off = uint32(r.base + uint64(c.off) - lo)
	}
	r.base = lo
}

func (r *ring) front() *cell { return &r.buf[r.head] }

// frontSeq is the seq of the front cell; the ring must not be empty.
func (r *ring) frontSeq() uint64 { return r.seqAt(0) }

func (r *ring) at(i int) *cell { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

// seqAt is the seq of the cell at i.
func (r *ring) seqAt(i int) uint64 {
	j := (r.head + i) & (len(r.buf) - 1)
	if r.wide != nil {
		return r.wide[j]
	}
	return r.base + uint64(r.buf[j].off)
}

// slotAt is the cell at i unpacked.
func (r *ring) slotAt(i int) slot { return r.at(i).slot(r.seqAt(i)) }

func (r *ring) pop() slot {
	e := r.slotAt(0)
	r.drop()
	return e
}

// removeAt removes the cell at i, moving those before it up (slow: for
// failures only), and returns it.
func (r *ring) removeAt(i int) slot {
	e := r.slotAt(i)
	for j := i; j > 0; j-- {
		*r.at(j) = *r.at(j - 1)
		if r.wide != nil {
			m := len(r.buf) - 1
			r.wide[(r.head+j)&m] = r.wide[(r.head+j-1)&m]
		}
	}
	r.drop()
	return e
}

// shrinkBelow is the buffer size under which a ring never shrinks.
const shrinkBelow = 4096

// drop removes the front cell without returning it. A buffer less than
// a quarter full is halved, so that a queue that was deep gives its index
// memory back as it drains.
func (r *ring) drop() {
	r.buf[r.head] = cell{}
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 {
		r.head = 0
		r.wide = nil
	}
	if r.n < len(r.buf)>>2 && len(r.buf) > shrinkBelow {
		r.resize(len(r.buf) >> 1)
	}
}

func (r *ring) grow() {
	size := len(r.buf) * 2
	if size == 0 {
		size = 16
	}
	r.resize(size)
}

// resize moves the cells to a new buffer of size (a power of two, at
// least r.n).
func (r *ring) resize(size int) {
	buf := make([]cell, size)
	for i := 0; i < r.n; i++ {
		buf[i] = *r.at(i)
	}
	if r.wide != nil {
		wide := make([]uint64, size)
		for i := 0; i < r.n; i++ {
			wide[i] = r.seqAt(i)
		}
		r.wide = wide
	}
	r.buf = buf
	r.head = 0
}

// clear drops every entry. A buffer of up to shrinkBelow cells is kept,
// as drop keeps it when the ring drains, so that a queue purged and filled
// again does not grow a new one cell by cell; a larger one goes.
func (r *ring) clear() {
	if len(r.buf) > shrinkBelow {
		r.buf = nil
	} else {
		clear(r.buf)
	}
	r.head = 0
	r.n = 0
	r.wide = nil
}

// returned is a min-heap of requeued entries ordered by Seq. Requeued
// messages always precede the ready list: the ready list only gains newer
// publishes at its tail, and everything ever delivered came from before it.
type returned []slot

func (h *returned) push(e slot) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].seq <= s[i].seq {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *returned) pop() slot {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = slot{}
	s = s[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].seq < s[m].seq {
			m = l
		}
		if r < len(s) && s[r].seq < s[m].seq {
			m = r
		}
		if m == i {
			break
		}
		s[m], s[i] = s[i], s[m]
		i = m
	}
	*h = s
	return top
}
