package exchange

import "github.com/warrenmq/warren/amqp"

// directIndex routes a message to the bindings whose key equals its routing key: one map
// lookup. Destinations under one key are a set, so Route needs no de-duplication.
type directIndex struct {
	byKey map[string]*destSet
}

func (x *directIndex) add(e *bindingEntry) {
	ds := x.byKey[e.b.Key]
	if ds == nil {
		if x.byKey == nil {
			x.byKey = make(map[string]*destSet)
		}
		ds = &destSet{}
		x.byKey[e.b.Key] = ds
	}
	ds.add(e.b.Destination)
}

func (x *directIndex) remove(e *bindingEntry) {
	ds := x.byKey[e.b.Key]
	if ds == nil {
		return
	}
	if ds.remove(e.b.Destination); ds.empty() {
		delete(x.byKey, e.b.Key)
	}
}

func (x *directIndex) route(key string, _ amqp.Table, out []Destination) []Destination {
	if ds := x.byKey[key]; ds != nil {
		out = append(out, ds.dests...)
	}
	return out
}
