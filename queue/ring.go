package queue

// slot is an Entry as the ready lists hold it: four words, so that the
// ready list stays dense (an Entry has more fields and is copied through
// memory, which made publish→deliver several times slower). meta packs
// the delivery count (saturating at 2^20-1), the redelivered flag and the
// expiry in unix ms (below 2^43, the year 2248; larger values are
// clamped). A slot whose message is paged out (paging.go) has a nil msg
// and keeps everything else, so that it is 32 bytes of index in RAM.
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

// ring is a growable FIFO of slots, used for the ready list.
type ring struct {
	buf  []slot
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) push(e slot) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = e
	r.n++
}

func (r *ring) front() *slot { return &r.buf[r.head] }

func (r *ring) pop() slot {
	e := r.buf[r.head]
	r.drop()
	return e
}

// shrinkBelow is the buffer size under which a ring never shrinks.
const shrinkBelow = 4096

// drop removes the front slot without returning it. A buffer less than
// a quarter full is halved, so that a queue that was deep gives its index
// memory back as it drains.
func (r *ring) drop() {
	r.buf[r.head] = slot{}
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 {
		r.head = 0
	}
	if r.n < len(r.buf)>>2 && len(r.buf) > shrinkBelow {
		r.resize(len(r.buf) >> 1)
	}
}

func (r *ring) at(i int) *slot { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring) grow() {
	size := len(r.buf) * 2
	if size == 0 {
		size = 16
	}
	r.resize(size)
}

// resize moves the slots to a new buffer of size (a power of two, at
// least r.n).
func (r *ring) resize(size int) {
	buf := make([]slot, size)
	for i := 0; i < r.n; i++ {
		buf[i] = *r.at(i)
	}
	r.buf = buf
	r.head = 0
}

// clear drops every entry. A buffer of up to shrinkBelow slots is kept,
// as drop keeps it when the ring drains, so that a queue purged and filled
// again does not grow a new one slot by slot; a larger one goes.
func (r *ring) clear() {
	if len(r.buf) > shrinkBelow {
		r.buf = nil
	} else {
		clear(r.buf)
	}
	r.head = 0
	r.n = 0
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
