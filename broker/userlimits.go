package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/store"
)

// User limits, as RabbitMQ's `rabbitmqctl set_user_limits`: max-connections
// (connections open at once) and max-channels (channels open at once, over
// all the user's connections). A negative value means no limit, 0 refuses
// every connection or channel; a limit not set is no limit. They are a
// definition command (set-user-limits merges, clear-user-limits removes one
// or all), kept in the user's store record and in the definitions export
// ("limits" of each user).

// The user limits.
const (
	UserLimitMaxConnections = "max-connections"
	UserLimitMaxChannels    = "max-channels"
)

// ErrInvalidUserLimit means a user limit is unknown or not an integer.
var ErrInvalidUserLimit = errors.New("broker: invalid user limit")

// checkUserLimits refuses names other than the user limits.
func checkUserLimits(limits map[string]int64) error {
	for _, k := range slices.Sorted(maps.Keys(limits)) {
		if k != UserLimitMaxConnections && k != UserLimitMaxChannels {
			return fmt.Errorf("%w: unrecognised term %q in user-limits", ErrInvalidUserLimit, k)
		}
	}
	return nil
}

// SetUserLimits sets the given limits of a user, keeping the others (as
// rabbitmqctl set_user_limits).
func (b *Broker) SetUserLimits(username string, limits map[string]int64) error {
	if err := checkUserLimits(limits); err != nil {
		return err
	}
	if len(limits) == 0 {
		return fmt.Errorf("%w: no limits given", ErrInvalidUserLimit)
	}
	v, err := json.Marshal(limits)
	if err != nil {
		return err
	}
	return b.propose(&defCmd{Op: opSetUserLimits, User: username, Value: v}).err
}

// ClearUserLimit clears a user's limit name, or all of them for "all".
// Clearing a limit that is not set (or unknown) is not an error, as in
// RabbitMQ.
func (b *Broker) ClearUserLimit(username, name string) error {
	return b.propose(&defCmd{Op: opClearUserLimits, User: username, Name: name}).err
}

// UserLimits returns a user's limits (nil when none are set), or
// ErrNotFound.
func (b *Broker) UserLimits(username string) (map[string]int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.users[username]
	if u == nil {
		return nil, fmt.Errorf("user %q: %w", username, ErrNotFound)
	}
	return maps.Clone(u.limits), nil
}

// applyUserLimits applies set-user-limits and clear-user-limits: the
// user's record is stored again with its new limits, then they take
// effect (for connections and channels opened from then on).
func (b *Broker) applyUserLimits(c *defCmd) DefResult {
	var set map[string]int64
	if c.Op == opSetUserLimits {
		if err := json.Unmarshal(c.Value, &set); err != nil {
			return DefResult{err: fmt.Errorf("%w: %v", ErrInvalidUserLimit, err)}
		}
		if err := checkUserLimits(set); err != nil {
			return DefResult{err: err}
		}
	}
	b.mu.Lock()
	u := b.users[c.User]
	if u == nil {
		b.mu.Unlock()
		return DefResult{err: fmt.Errorf("user %q: %w", c.User, ErrNotFound)}
	}
	limits := changedLimits(u.limits, c.Op == opSetUserLimits, set, c.Name)
	rec := &store.User{ID: u.storeID, Name: u.name, PasswordHash: u.hash, HashAlgorithm: u.algorithm, Tags: u.tags}
	b.mu.Unlock()
	rec.Limits = limits
	if rec.ID != 0 {
		if err := b.storePut(rec); err != nil {
			return DefResult{err: err}
		}
	}
	b.mu.Lock()
	u.limits = limits
	b.noteChannelLimitsLocked()
	b.mu.Unlock()
	return DefResult{id: rec.ID}
}

// changedLimits is a copy of limits with set merged in (when setting) or
// the limit clear removed ("all": every one); nil when none is left.
func changedLimits(limits map[string]int64, setting bool, set map[string]int64, clear string) map[string]int64 {
	out := maps.Clone(limits)
	switch {
	case setting:
		if out == nil {
			out = make(map[string]int64, len(set))
		}
		maps.Copy(out, set)
	case clear == "all":
		out = nil
	default:
		delete(out, clear)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// noteChannelLimitsLocked records whether any user has a max-channels
// limit: without one, channel.open counts nothing under Broker.mu. Hold
// b.mu.
func (b *Broker) noteChannelLimitsLocked() {
	limited := false
	for _, u := range b.users {
		if n, ok := u.limits[UserLimitMaxChannels]; ok && n >= 0 {
			limited = true
			break
		}
	}
	b.channelLimits.Store(limited)
}

// userLimit is u's limit name, or -1 (none). Hold b.mu.
func userLimit(u *user, name string) int64 {
	if u == nil {
		return -1
	}
	n, ok := u.limits[name]
	if !ok || n < 0 {
		return -1
	}
	return n
}

// admitChannel counts a channel in at channel.open, or refuses it with
// 530 NOT_ALLOWED (a connection error, as RabbitMQ) when the user has
// reached its max-channels. Reader goroutine. With no max-channels limit
// anywhere it takes no lock.
func (c *conn) admitChannel() error {
	b := c.b
	if !b.channelLimits.Load() {
		c.openChannels.Add(1)
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if limit := userLimit(b.users[c.userNm], UserLimitMaxChannels); limit >= 0 {
		var n int64
		for o := range b.conns {
			if o.userNm == c.userNm {
				n += int64(o.openChannels.Load())
			}
		}
		if n >= limit {
			return amqp.Errorf(amqp.NotAllowed, 0, 0,
				"number of channels opened for user '%s' has reached the maximum allowed user limit of (%d)", c.userNm, limit)
		}
	}
	c.openChannels.Add(1)
	return nil
}
