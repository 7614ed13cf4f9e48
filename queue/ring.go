package queue

// ring is a growable FIFO of entries, used for the ready list.
type ring struct {
	buf  []Entry
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) push(e Entry) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)&(len(r.buf)-1)] = e
	r.n++
}

func (r *ring) front() *Entry { return &r.buf[r.head] }

func (r *ring) pop() Entry {
	e := r.buf[r.head]
	r.buf[r.head] = Entry{}
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if r.n == 0 {
		r.head = 0
	}
	return e
}

func (r *ring) at(i int) *Entry { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring) grow() {
	size := len(r.buf) * 2
	if size == 0 {
		size = 16
	}
	buf := make([]Entry, size)
	for i := 0; i < r.n; i++ {
		buf[i] = *r.at(i)
	}
	r.buf = buf
	r.head = 0
}

// clear drops every entry and shrinks the buffer.
func (r *ring) clear() {
	r.buf = nil
	r.head = 0
	r.n = 0
}

// returned is a min-heap of requeued entries ordered by Seq. Requeued
// messages always precede the ready list: the ready list only gains newer
// publishes at its tail, and everything ever delivered came from before it.
type returned []Entry

func (h *returned) push(e Entry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].Seq <= s[i].Seq {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *returned) pop() Entry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = Entry{}
	s = s[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].Seq < s[m].Seq {
			m = l
		}
		if r < len(s) && s[r].Seq < s[m].Seq {
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
