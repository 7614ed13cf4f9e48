package exchange

import "github.com/warrenmq/warren/amqp"

// fanoutIndex routes a message to every destination bound, whatever the keys.
type fanoutIndex struct {
	dests destSet
}

func (x *fanoutIndex) add(e *bindingEntry) { x.dests.add(e.b.Destination) }

func (x *fanoutIndex) remove(e *bindingEntry) { x.dests.remove(e.b.Destination) }

func (x *fanoutIndex) route(_ string, _ amqp.Table, out []Destination) []Destination {
	return append(out, x.dests.dests...)
}
