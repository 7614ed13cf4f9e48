package exchange

import "testing"

func TestParseKind(t *testing.T) {
	tests := []struct {
		in   string
		want Kind
		ok   bool
	}{
		{"direct", Direct, true},
		{"fanout", Fanout, true},
		{"topic", Topic, true},
		{"headers", Headers, true},
		{"Direct", 0, false},
		{"", 0, false},
		{"x-delayed-message", 0, false},
		{"x-consistent-hash", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseKind(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseKind(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
		if ok && got.String() != tt.in {
			t.Errorf("%v.String() = %q; want %q", got, got.String(), tt.in)
		}
	}
	if s := Kind(9).String(); s != "Kind(9)" {
		t.Errorf("Kind(9).String() = %q", s)
	}
}
