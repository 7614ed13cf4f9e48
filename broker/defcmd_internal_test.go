package broker

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestDefCmdRoundTrip encodes commands with every field set at random and
// decodes them: the same command, and the same bytes when encoded again.
func TestDefCmdRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		if r.IntN(4) == 0 {
			return ""
		}
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(bytes.ToValidUTF8(b, []byte("?")))
	}
	raw := func() []byte {
		if r.IntN(3) == 0 {
			return nil
		}
		b := make([]byte, 1+r.IntN(20))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	}
	for i := range 2000 {
		c := &defCmd{
			Op: defOp(1 + r.IntN(int(opEnd)-1)), VHost: str(), VHostID: r.Uint64(), Name: str(), Type: str(),
			Durable: r.IntN(2) == 0, AutoDelete: r.IntN(2) == 0, Internal: r.IntN(2) == 0, Exclusive: r.IntN(2) == 0,
			Args: raw(), Owner: r.Uint64(), ID: r.Uint64(), IfUnused: r.IntN(2) == 0, Force: r.IntN(2) == 0,
			Source: str(), Dest: str(), ToExchange: r.IntN(2) == 0, Key: str(), User: str(), Hash: raw(),
			HashAlgorithm: str(), Configure: str(), Write: str(), Read: str(), Exchange: str(), Pattern: str(),
			ApplyTo: str(), Priority: r.IntN(100) - 50, Operator: r.IntN(2) == 0,
		}
		if r.IntN(2) == 0 {
			c.Tags = []string{str() + "a", str() + "b"}
		}
		if r.IntN(2) == 0 {
			c.Definition = []byte(`{"max-length":5,"overflow":"reject-publish"}`)
			c.Value = []byte(`"warren"`)
		}
		enc, err := c.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeDefCmd(enc)
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("command %d: decoded\n%+v\nwant\n%+v", i, got, c)
		}
		again, err := got.encode()
		if err != nil || !bytes.Equal(again, enc) {
			t.Fatalf("command %d: encoded again %s (%v), first %s", i, again, err, enc)
		}
	}
	good, err := (&defCmd{Op: opBind, VHost: "/", Source: "x", Tags: []string{"a"}, Priority: -3}).encode()
	if err != nil {
		t.Fatal(err)
	}
	bad := [][]byte{nil, {1}, {2, byte(opBind), 0}, {1, 0, 0}, {1, byte(opEnd), 0},
		{1, byte(opBind), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80},
		{1, byte(opBind), 1 << 3}, append(good[:len(good):len(good)], 0)}
	for i := 1; i < len(good); i++ {
		bad = append(bad, good[:i])
	}
	for _, b := range bad {
		if _, err := decodeDefCmd(b); err == nil {
			t.Errorf("decoding %v: no error", b)
		}
	}
}
