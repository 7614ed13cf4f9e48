package broker_test

import (
	"strings"
	"testing"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/broker/brokertest"
)

// TestHandshakeStartFrame checks connection.start on successive
// connections: the broker builds the frame once and reuses it.
func TestHandshakeStartFrame(t *testing.T) {
	s := brokertest.Start(t, nil)
	for i := range 3 {
		r := rawDial(t, s.Addr)
		r.write(amqp.ProtocolHeader)
		start := rawExpect[*amqp.ConnectionStart](r, 0)
		if start.VersionMajor != 0 || start.VersionMinor != 9 || start.Locales != "en_US" {
			t.Fatalf("connection %d: version %d-%d, locales %q", i, start.VersionMajor, start.VersionMinor, start.Locales)
		}
		if start.Mechanisms != "PLAIN AMQPLAIN" {
			t.Fatalf("connection %d: mechanisms %q", i, start.Mechanisms)
		}
		p := start.ServerProperties
		if p["product"] != "RabbitMQ" || p["version"] != broker.RabbitMQVersion {
			t.Fatalf("connection %d: product %v, version %v", i, p["product"], p["version"])
		}
		if info, _ := p["information"].(string); !strings.HasPrefix(info, "Warren "+broker.Version+",") {
			t.Fatalf("connection %d: information %q", i, info)
		}
		caps, _ := p["capabilities"].(amqp.Table)
		for _, c := range []string{"connection.blocked", "authentication_failure_close", "publisher_confirms"} {
			if caps[c] != true {
				t.Fatalf("connection %d: capability %s = %v", i, c, caps[c])
			}
		}
	}
}

// BenchmarkHandshake opens connections with one channel each, as
// `warren bench --connect-only` does, one at a time.
func BenchmarkHandshake(b *testing.B) {
	s := brokertest.Start(b, nil)
	b.ReportAllocs()
	for b.Loop() {
		r := rawOpen(b, s.Addr, defaultTune)
		r.send(1, &amqp.ChannelOpen{})
		rawExpect[*amqp.ChannelOpenOk](r, 1)
		_ = r.nc.Close()
	}
}
