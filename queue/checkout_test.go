package queue

import (
	"bytes"
	"fmt"
	"testing"
)

// TestCheckoutMatchesApply replays random command logs (those of
// TestDeterministicReplay, every other checkout without a clock) into two
// queues: one applies every command with Apply, the other takes each
// checkout through Checkout instead. The checkouts must make the same
// decisions — the same dead letters, then the same deliveries to the same
// consumers — and the queues must end in the same state.
func TestCheckoutMatchesApply(t *testing.T) {
	prio := DefaultConfig()
	prio.MaxPriority = 4
	sac := DefaultConfig()
	sac.SingleActiveConsumer = true
	groups := DefaultConfig()
	groups.GroupHeader = "JMSXGroupID"
	configs := map[string]Config{"classic": DefaultConfig(), "priority": prio, "single-active": sac, "groups": groups}
	commands, seeds := replayCommands()
	for _, name := range []string{"classic", "priority", "single-active", "groups"} {
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", name, seed), func(t *testing.T) {
				cfg := configs[name]
				w := newWorkload(seed, cfg)
				w.run(commands)
				log := append([]Cmd(nil), w.log...)
				checkouts, delivered := 0, 0
				for i := range log {
					if log[i].Op == OpCheckout {
						if checkouts%2 == 1 {
							log[i].Now = 0
						}
						checkouts++
					}
				}

				applied, typed := NewWithConfig(cfg), NewWithConfig(cfg)
				var ds []Delivery
				for i := range log {
					cmd := &log[i]
					want := apply(applied, cmd)
					if cmd.Op != OpCheckout {
						if got := apply(typed, cmd); !bytes.Equal(got, want) {
							t.Fatalf("command %d (op %d): effects\n%q\nwant\n%q", i, cmd.Op, got, want)
						}
						continue
					}
					var dls []DeadLetter
					ds = typed.Checkout(cmd.Now, ds[:0], &dls)
					var effs []Effect
					for _, dl := range dls {
						effs = append(effs, Effect{Kind: EffDeadLetter, Reason: dl.Reason, Entry: dl.Entry})
					}
					for _, d := range ds {
						if c := typed.consumer(d.Consumer.ID); c != d.Consumer {
							t.Fatalf("command %d: delivery to consumer %d names record %p, the queue's is %p",
								i, d.Consumer.ID, d.Consumer, c)
						}
						effs = append(effs, Effect{Kind: EffDeliver, Consumer: d.Consumer.ID, Entry: d.Entry})
					}
					delivered += len(ds)
					if got := encodeEffects(nil, effs); !bytes.Equal(got, want) {
						t.Fatalf("checkout %d (now %d): effects\n%q\nwant\n%q", i, cmd.Now, got, want)
					}
				}
				if delivered == 0 {
					t.Fatal("no checkout delivered anything")
				}
				if !bytes.Equal(typed.Snapshot(), applied.Snapshot()) {
					t.Fatal("state differs")
				}
			})
		}
	}
}
