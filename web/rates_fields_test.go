package web

import (
	"reflect"
	"testing"

	"github.com/warrenmq/warren/broker"
)

// ones sets every integer field of *p, nested structs included, to 1.
func ones(p any) {
	var set func(v reflect.Value)
	set = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Field(i).CanSet() {
					set(v.Field(i))
				}
			}
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			v.SetInt(1)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			v.SetUint(1)
		}
	}
	set(reflect.ValueOf(p).Elem())
}

// TestKindFieldsCoverValues: a series keeps only its kind's fields
// (kindFields), so the values sampled for each kind must set no others,
// and a sample keeps the values of those it sets.
func TestKindFieldsCoverValues(t *testing.T) {
	var q broker.QueueInfo
	var x broker.ExchangeInfo
	var c broker.ConnectionInfo
	var ch broker.ChannelStats
	for _, p := range []any{&q, &x, &c, &ch} {
		ones(p)
	}
	for _, tc := range []struct {
		kind seriesKind
		v    *values
	}{
		{kindQueue, queueValues(q)},
		{kindExchange, exchangeValues(x)},
		{kindConnection, connectionValues(c)},
		{kindChannel, ptr(channelValues(ch))},
	} {
		set := 0
		for f := range nFields {
			if tc.v[f] != 0 {
				set++
				if kindIndex[tc.kind][f] < 0 {
					t.Errorf("kind %d: field %d is set by its values but not kept by its series", tc.kind, f)
				}
			}
		}
		if set == 0 {
			t.Errorf("kind %d: no field set", tc.kind)
		}
		s := &series{kind: tc.kind}
		s.record(1000, tc.v)
		next := *tc.v
		for f := range nFields {
			next[f] *= 3
		}
		s.record(3000, &next)
		for f := range nFields {
			if got := s.point(1).v[f]; got != next[f] {
				t.Errorf("kind %d field %d: last sample %v, want %v", tc.kind, f, got, next[f])
			}
			if got := s.point(0).v[f]; got != tc.v[f] {
				t.Errorf("kind %d field %d: previous sample %v, want %v", tc.kind, f, got, tc.v[f])
			}
		}
		v := view{s: s}
		for f := range nFields {
			if want := tc.v[f]; isCounter(f) && v.rate(f) != want {
				t.Errorf("kind %d field %d: rate %v, want %v", tc.kind, f, v.rate(f), want)
			}
		}
	}
}

func ptr(v values) *values { return &v }
