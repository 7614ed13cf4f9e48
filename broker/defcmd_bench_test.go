package broker_test

import (
	"fmt"
	"testing"

	"github.com/warrenmq/warren/broker"
)

// BenchmarkDeclareDeleteQueue times declaring a transient queue, binding
// it and deleting it through the management methods, with no store: the
// cost of a definition change in memory, commands included.
func BenchmarkDeclareDeleteQueue(b *testing.B) {
	br, err := broker.New(broker.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("q%d", i)
		i++
		if err := br.DeclareQueue("/", "", broker.QueueSpec{Name: name}); err != nil {
			b.Fatal(err)
		}
		if err := br.Bind("/", "", "amq.direct", name, false, name, nil, true); err != nil {
			b.Fatal(err)
		}
		if _, err := br.DeleteQueue("/", name, false, false); err != nil {
			b.Fatal(err)
		}
	}
}
