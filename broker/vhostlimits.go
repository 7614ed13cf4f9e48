package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/warrenmq/warren/store"
)

// Vhost limits, as RabbitMQ's `rabbitmqctl set_vhost_limits`:
// max-connections (connections open at once in the vhost) and max-queues
// (queues in the vhost). A negative value means no limit, 0 refuses every
// connection or queue; a limit not set is no limit. They come on top of
// the node's own per-vhost limits (Config.MaxConnectionsPerVHost and
// MaxQueuesPerVHost), which apply to every vhost. They are a definition
// command (set-vhost-limits merges, clear-vhost-limits removes one or
// all), kept in the vhost's store record, in the definitions snapshot,
// and in the definitions export as RabbitMQ's parameters of component
// vhost-limits.

// The vhost limits.
const (
	VHostLimitMaxConnections = "max-connections"
	VHostLimitMaxQueues      = "max-queues"
)

// ErrInvalidVHostLimit means a vhost limit is unknown or not an integer.
var ErrInvalidVHostLimit = errors.New("broker: invalid vhost limit")

// checkVHostLimits refuses names other than the vhost limits.
func checkVHostLimits(limits map[string]int64) error {
	for _, k := range slices.Sorted(maps.Keys(limits)) {
		if k != VHostLimitMaxConnections && k != VHostLimitMaxQueues {
			return fmt.Errorf("%w: unrecognised terms [%s] in limits", ErrInvalidVHostLimit, k)
		}
	}
	return nil
}

// SetVHostLimits sets the given limits of a vhost, keeping the others (as
// rabbitmqctl set_vhost_limits).
func (b *Broker) SetVHostLimits(vhost string, limits map[string]int64) error {
	if err := checkVHostLimits(limits); err != nil {
		return err
	}
	if len(limits) == 0 {
		return fmt.Errorf("%w: no limits given", ErrInvalidVHostLimit)
	}
	v, err := json.Marshal(limits)
	if err != nil {
		return err
	}
	return b.propose(&defCmd{Op: opSetVHostLimits, VHost: vhost, Value: v}).err
}

// ClearVHostLimit clears a vhost's limit name, or all of them for "all".
// Clearing a limit that is not set is not an error.
func (b *Broker) ClearVHostLimit(vhost, name string) error {
	return b.propose(&defCmd{Op: opClearVHostLimits, VHost: vhost, Name: name}).err
}

// VHostLimitsOf returns a vhost's own limits (nil when none are set), or
// ErrNotFound.
func (b *Broker) VHostLimitsOf(vhost string) (map[string]int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.vhosts[vhost]
	if v == nil {
		return nil, fmt.Errorf("vhost %q: %w", vhost, ErrNotFound)
	}
	return maps.Clone(v.limits), nil
}

// applyVHostLimits applies set-vhost-limits and clear-vhost-limits: the
// vhost's record is stored again with its new limits, then they take
// effect (for connections opened and queues declared from then on).
func (b *Broker) applyVHostLimits(c *defCmd) DefResult {
	var set map[string]int64
	if c.Op == opSetVHostLimits {
		if err := json.Unmarshal(c.Value, &set); err != nil {
			return DefResult{err: fmt.Errorf("%w: %v", ErrInvalidVHostLimit, err)}
		}
		if err := checkVHostLimits(set); err != nil {
			return DefResult{err: err}
		}
	}
	b.mu.Lock()
	v := b.vhosts[c.VHost]
	if v == nil {
		b.mu.Unlock()
		return DefResult{err: fmt.Errorf("vhost %q: %w", c.VHost, ErrNotFound)}
	}
	limits := changedLimits(v.limits, c.Op == opSetVHostLimits, set, c.Name)
	id := v.storeID
	b.mu.Unlock()
	if id != 0 {
		if err := b.storePut(&store.VHost{ID: id, Name: c.VHost, Limits: limits}); err != nil {
			return DefResult{err: err}
		}
	}
	b.mu.Lock()
	v.setLimitsLocked(limits)
	b.mu.Unlock()
	return DefResult{id: id}
}

// setLimitsLocked makes limits the vhost's. Hold b.mu.
func (v *vhost) setLimitsLocked(limits map[string]int64) {
	v.limits = limits
	v.maxQueues.Store(vhostLimit(v, VHostLimitMaxQueues))
}

// vhostLimit is v's limit name, or -1 (none). Hold b.mu (or own v).
func vhostLimit(v *vhost, name string) int64 {
	if v == nil {
		return -1
	}
	n, ok := v.limits[name]
	if !ok || n < 0 {
		return -1
	}
	return n
}
