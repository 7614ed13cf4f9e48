package amqp

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// sampleStream returns a publish (method, header, body in two frames), a
// heartbeat and a channel.close on channel 7, with the frames expected.
func sampleStream() ([]byte, []Frame) {
	var b []byte
	var frames []Frame
	add := func(typ uint8, ch uint16, payload []byte) {
		b = AppendFrame(b, typ, ch, payload)
		frames = append(frames, Frame{Type: typ, Channel: ch, Payload: payload})
	}
	add(FrameMethod, 7, (&BasicPublish{Exchange: "ex", RoutingKey: "rk"}).AppendTo(nil))
	hdr, _ := (&ContentHeader{ClassID: ClassBasic, BodySize: 5000, Properties: Properties{ContentType: "t"}}).AppendTo(nil)
	add(FrameHeader, 7, hdr)
	add(FrameBody, 7, bytes.Repeat([]byte{'a'}, 4000))
	add(FrameBody, 7, bytes.Repeat([]byte{'b'}, 1000))
	add(FrameHeartbeat, 0, nil)
	add(FrameMethod, 7, (&ChannelClose{ReplyCode: 200}).AppendTo(nil))
	return b, frames
}

func readAll(t *testing.T, fr *FrameReader) []Frame {
	t.Helper()
	var got []Frame
	for {
		f, err := fr.ReadFrame()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("frame %d: %v", len(got), err)
		}
		got = append(got, Frame{f.Type, f.Channel, bytes.Clone(f.Payload)})
	}
}

func sameFrames(t *testing.T, got, want []Frame) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Type != want[i].Type || got[i].Channel != want[i].Channel || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Errorf("frame %d: type %d ch %d %d bytes, want type %d ch %d %d bytes", i,
				got[i].Type, got[i].Channel, len(got[i].Payload), want[i].Type, want[i].Channel, len(want[i].Payload))
		}
	}
}

func TestFrameReader(t *testing.T) {
	stream, want := sampleStream()
	readers := map[string]func() io.Reader{
		"whole":        func() io.Reader { return bytes.NewReader(stream) },
		"one byte":     func() io.Reader { return iotest.OneByteReader(bytes.NewReader(stream)) },
		"half":         func() io.Reader { return iotest.HalfReader(bytes.NewReader(stream)) },
		"data+EOF":     func() io.Reader { return iotest.DataErrReader(bytes.NewReader(stream)) },
		"with 0 reads": func() io.Reader { return &zeroReader{r: iotest.OneByteReader(bytes.NewReader(stream))} },
	}
	for name, mk := range readers {
		for _, size := range []int{0, 1, 600, 5000} {
			fr := NewFrameReader(mk(), size)
			sameFrames(t, readAll(t, fr), want)
			if _, err := fr.ReadFrame(); err != io.EOF {
				t.Errorf("%s/%d: after the end: %v", name, size, err)
			}
		}
	}
}

// zeroReader returns (0, nil) before every real read.
type zeroReader struct {
	r    io.Reader
	flip bool
}

func (z *zeroReader) Read(p []byte) (int, error) {
	z.flip = !z.flip
	if z.flip {
		return 0, nil
	}
	return z.r.Read(p)
}

func TestFrameReaderBuffered(t *testing.T) {
	stream, want := sampleStream()
	fr := NewFrameReader(bytes.NewReader(stream), 64<<10)
	f, err := fr.ReadFrame()
	if err != nil || f.Type != FrameMethod {
		t.Fatal(f, err)
	}
	if got := fr.Buffered(); got != len(stream)-len(want[0].Payload)-FrameOverhead {
		t.Errorf("Buffered = %d", got)
	}
	readAll(t, fr)
	if fr.Buffered() != 0 {
		t.Errorf("Buffered at the end = %d", fr.Buffered())
	}
}

func wantFrameError(t *testing.T, err error, what string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != FrameError || !e.Hard() {
		t.Fatalf("%s: %v, want 501 FRAME_ERROR", what, err)
	}
}

func TestFrameReaderBadFrameEnd(t *testing.T) {
	b := AppendHeartbeat(AppendFrame(nil, FrameBody, 1, []byte("abc")))
	b[len(b)-9] = 0xcd // the body frame's end octet
	fr := NewFrameReader(bytes.NewReader(b), 0)
	_, err := fr.ReadFrame()
	wantFrameError(t, err, "bad frame-end")
	_, err2 := fr.ReadFrame()
	if err2 != err {
		t.Errorf("protocol error not sticky: %v", err2)
	}
}

func TestFrameReaderUnknownType(t *testing.T) {
	for _, typ := range []byte{0, 4, 9, 'A', 0xff} {
		fr := NewFrameReader(bytes.NewReader(AppendFrame(nil, typ, 0, nil)), 0)
		_, err := fr.ReadFrame()
		wantFrameError(t, err, "unknown frame type")
	}
	// A client that sends another protocol header mid-stream.
	fr := NewFrameReader(bytes.NewReader([]byte("AMQP\x00\x00\x09\x01")), 0)
	_, err := fr.ReadFrame()
	wantFrameError(t, err, "protocol header as frame")
}

// headerOnlyReader returns a frame header and fails the test if more is
// read.
type headerOnlyReader struct {
	t    *testing.T
	hdr  []byte
	done bool
}

func (r *headerOnlyReader) Read(p []byte) (int, error) {
	if r.done {
		r.t.Fatal("payload read after an oversize header")
	}
	r.done = true
	return copy(p, r.hdr), nil
}

func TestFrameReaderOversize(t *testing.T) {
	// 0-9-1 frame-max counts the whole frame: a payload of max-8 fits.
	const max = 4096
	ok := AppendFrame(nil, FrameBody, 1, make([]byte, max-FrameOverhead))
	fr := NewFrameReader(bytes.NewReader(ok), 512)
	fr.SetMaxFrameSize(max)
	if f, err := fr.ReadFrame(); err != nil || len(f.Payload) != max-FrameOverhead {
		t.Fatalf("frame of exactly frame-max: %v", err)
	}

	big := AppendFrame(nil, FrameBody, 1, make([]byte, max-FrameOverhead+1))
	fr = NewFrameReader(&headerOnlyReader{t: t, hdr: big[:FrameHeaderSize]}, 512)
	fr.SetMaxFrameSize(max)
	_, err := fr.ReadFrame()
	wantFrameError(t, err, "oversize frame")
	if len(fr.buf) != 512 {
		t.Errorf("buffer grew to %d for a rejected frame", len(fr.buf))
	}

	// A claimed 4 GiB frame against the default cap.
	fr = NewFrameReader(&headerOnlyReader{t: t, hdr: []byte{FrameBody, 0, 1, 0xff, 0xff, 0xff, 0xff}}, 0)
	_, err = fr.ReadFrame()
	wantFrameError(t, err, "4 GiB frame")
	fr.SetMaxFrameSize(0)
	if fr.max != defaultMaxFrameSize {
		t.Errorf("SetMaxFrameSize(0) = %d", fr.max)
	}
}

func TestFrameReaderTruncated(t *testing.T) {
	stream, _ := sampleStream()
	for _, n := range []int{1, 6, 7, 20, len(stream) - 1} {
		fr := NewFrameReader(bytes.NewReader(stream[:n]), 0)
		var err error
		for err == nil {
			_, err = fr.ReadFrame()
		}
		if err != io.ErrUnexpectedEOF {
			t.Errorf("stream cut at %d: %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

func TestFrameReaderIOError(t *testing.T) {
	boom := errors.New("boom")
	stream, want := sampleStream()
	r := io.MultiReader(bytes.NewReader(stream[:10]), iotest.ErrReader(boom))
	fr := NewFrameReader(r, 0)
	if _, err := fr.ReadFrame(); err != boom {
		t.Fatalf("got %v, want the reader's error", err)
	}
	// The error is not sticky: the reader may be retried.
	fr.rd = bytes.NewReader(stream[10:])
	sameFrames(t, readAll(t, fr), want)

	fr = NewFrameReader(badCountReader{}, 0)
	if _, err := fr.ReadFrame(); err == nil {
		t.Error("invalid read count accepted")
	}
	fr = NewFrameReader(readerFunc(func([]byte) (int, error) { return 0, nil }), 0)
	if _, err := fr.ReadFrame(); err != io.ErrNoProgress {
		t.Errorf("reader without progress: %v", err)
	}
}

type badCountReader struct{}

func (badCountReader) Read(p []byte) (int, error) { return len(p) + 1, nil }

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestFrameToMethod covers the method-level errors a reader loop meets.
func TestFrameToMethod(t *testing.T) {
	var b []byte
	b = AppendFrame(b, FrameMethod, 1, []byte{0, 60, 0, 40, 0}) // truncated publish
	b = AppendFrame(b, FrameMethod, 1, []byte{0, 60, 0, 99})    // unknown method
	b = AppendFrame(b, FrameMethod, 1, []byte{0, 60})           // no method id
	fr := NewFrameReader(bytes.NewReader(b), 0)
	var md MethodDecoder
	for _, code := range []uint16{FrameError, NotImplemented, FrameError} {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		_, err = md.Decode(f.Payload)
		var e *Error
		if !errors.As(err, &e) || e.Code != code {
			t.Errorf("got %v, want %d", err, code)
		}
	}
}

func TestAppendFrames(t *testing.T) {
	if got := AppendHeartbeat(nil); !bytes.Equal(got, []byte{8, 0, 0, 0, 0, 0, 0, 0xce}) {
		t.Errorf("heartbeat % x", got)
	}
	body := bytes.Repeat([]byte("0123456789"), 100)
	for _, tt := range []struct {
		frameMax uint32
		frames   int
	}{{0, 1}, {4, 1}, {FrameOverhead, 1}, {FrameOverhead + 1, 1000}, {108, 10}, {109, 10}, {4096, 1}} {
		b := AppendBodyFrames([]byte("x"), 3, body, tt.frameMax)
		fr := NewFrameReader(bytes.NewReader(b[1:]), 0)
		frames := readAll(t, fr)
		if len(frames) != tt.frames {
			t.Errorf("frameMax %d: %d frames, want %d", tt.frameMax, len(frames), tt.frames)
		}
		var got []byte
		for _, f := range frames {
			if f.Type != FrameBody || f.Channel != 3 || (tt.frameMax > FrameOverhead && len(f.Payload)+FrameOverhead > int(tt.frameMax)) {
				t.Errorf("frameMax %d: bad frame %d %d %d", tt.frameMax, f.Type, f.Channel, len(f.Payload))
			}
			got = append(got, f.Payload...)
		}
		if !bytes.Equal(got, body) {
			t.Errorf("frameMax %d: body differs", tt.frameMax)
		}
	}
	if b := AppendBodyFrames([]byte("x"), 1, nil, 4096); !bytes.Equal(b, []byte("x")) {
		t.Errorf("empty body: % x", b)
	}
}

func TestAppendNoAlloc(t *testing.T) {
	buf := make([]byte, 0, 64<<10)
	m := &BasicDeliver{ConsumerTag: "ctag", DeliveryTag: 1, Exchange: "ex", RoutingKey: "rk"}
	hdr := []byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0}
	body := make([]byte, 16)
	p := &Properties{ContentType: "x", Headers: Table{"a": "b"}}
	n := testing.AllocsPerRun(100, func() {
		b := AppendMethodFrame(buf[:0], 1, m)
		b = AppendFrame(b, FrameHeader, 1, hdr)
		b = AppendBodyFrames(b, 1, body, 4096)
		b = AppendHeaderFrame(b, 1, 60, 16, p)
		_ = AppendHeartbeat(b)
	})
	if n != 0 {
		t.Errorf("%v allocs", n)
	}
}
