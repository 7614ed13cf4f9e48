package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/cluster"
	"github.com/warrenmq/warren/store"
)

// The data groups of a clustered warren: the pool of Raft groups quorum
// queues are replicated in. Their plan (which nodes are the members of
// each group, PlanGroups) is a definition like any other: the metadata
// leader records it, once the cluster has as many nodes as a group has
// members, as the global parameter dataGroupsParam; every node starts the
// groups the plan makes it a member of that hold a queue (the others stay
// dormant: no Raft group runs, so an unused group costs nothing), with the
// broker's QueueGroup as their state machine, and the broker places new quorum queues in them
// (broker/quorumrepl.go). A quorum queue declared before there is a plan
// stays on the node it was declared on.

// dataGroupsParam is the global parameter holding the data groups' plan
// (a JSON list of cluster.GroupSpec).
const dataGroupsParam = "warren_data_groups"

// dataGroupLogBase is the store log id of group 0 of the data groups: group
// g's log is dataGroupLogBase+g (the metadata group's is metadataLogID).
const dataGroupLogBase = 2 << 32

func quorumFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "quorum-groups", Value: 4, EnvVars: []string{"WARREN_QUORUM_GROUPS"}, Usage: "data groups (Raft groups quorum queues are replicated in) the cluster plans"},
		&cli.IntFlag{Name: "quorum-group-size", Value: 3, EnvVars: []string{"WARREN_QUORUM_GROUP_SIZE"}, Usage: "members of each data group; the plan is made once the cluster has this many nodes"},
		&cli.DurationFlag{Name: "quorum-heartbeat-timeout", Value: 500 * time.Millisecond, EnvVars: []string{"WARREN_QUORUM_HEARTBEAT_TIMEOUT"}, Usage: "how long a data group's followers wait for its leader before electing another (with fast elections on a lost session, failover medians measured: 0.14 s at 250ms, 0.29 s at 500ms, 1 s at 1s; shorter costs more idle CPU)"},
	}
}

// dataGroups is the node's side of the data groups: broker.QuorumGroups.
type dataGroups struct {
	c     *clustered
	dg    *cluster.DataGroups
	count int
	size  int

	// editMu serializes this node's changes of the plan (editPlan).
	editMu sync.Mutex

	mu   sync.Mutex
	b    *broker.Broker
	raw  []byte
	plan []cluster.GroupSpec
}

var (
	_ broker.QuorumGroups     = (*dataGroups)(nil)
	_ broker.QuorumMembership = (*dataGroups)(nil)
)

// quorumGroups returns broker.Config.QuorumGroups (nil when clustering is
// off or --quorum-groups is 0).
func (c *clustered) quorumGroups(cc *cli.Context) (broker.QuorumGroups, error) {
	if c == nil || cc.Int("quorum-groups") <= 0 {
		return nil, nil
	}
	d := &dataGroups{c: c, count: cc.Int("quorum-groups"), size: max(cc.Int("quorum-group-size"), 1)}
	c.groups = d
	return d, nil
}

// startDataGroups makes the node's data groups over b's state machines and
// starts following the plan (run's goroutine, stopped by ctx).
func (d *dataGroups) start(ctx context.Context, cc *cli.Context, st *store.Store, b *broker.Broker) error {
	dg, err := cluster.NewDataGroups(cluster.DataGroupsConfig{
		Node:    d.c.node,
		Store:   st,
		LogBase: dataGroupLogBase,
		Dir:     filepath.Join(cc.String("data-dir"), "raft", "groups"),
		Machine: func(g uint64) cluster.StateMachine {
			return machine{b.QueueGroupMachine(g)}
		},
		ProposeTimeout:    cc.Duration("cluster-propose-timeout"),
		HeartbeatTimeout:  cc.Duration("quorum-heartbeat-timeout"),
		SnapshotThreshold: cc.Uint64("cluster-snapshot-threshold"),
		TrailingLogs:      cc.Uint64("cluster-trailing-logs"),
		Logger:            d.c.log,
	})
	if err != nil {
		return err
	}
	d.dg = dg
	d.mu.Lock()
	d.b = b
	d.mu.Unlock()
	d.c.wg.Add(1)
	go func() {
		defer d.c.wg.Done()
		d.follow(ctx, b)
	}()
	return nil
}

// follow starts the groups of the plan, and has the metadata leader make
// the plan once the cluster is large enough. It looks every followPlanning
// until there is a plan, then when the broker signals a placement or a
// plan change (DataGroupsChanged), and every followPlanned besides.
func (d *dataGroups) follow(ctx context.Context, b *broker.Broker) {
	t := time.NewTimer(followPlanning)
	defer t.Stop()
	for {
		every := followPlanning
		if plan, ok := d.current(); ok {
			every = followPlanned
			// Only the groups that hold a queue run: a group without one
			// stays dormant (no Raft, no heartbeats) until a queue is
			// placed in it, or this node proposes to it (Log).
			use := b.QuorumGroupsInUse()
			var wake []cluster.GroupSpec
			for _, s := range plan {
				if use[s.ID] {
					wake = append(wake, s)
				}
			}
			if _, err := d.dg.Ensure(wake); err != nil && !errors.Is(err, cluster.ErrClosed) {
				d.c.log.Warn("starting data groups", zap.Error(err))
			}
			d.reconcile(b, plan)
		} else if d.c.meta.IsLeader() {
			members := d.c.meta.Members()
			if len(members) >= d.size {
				var nodes []cluster.GroupMember
				for name, addr := range members {
					nodes = append(nodes, cluster.GroupMember{Name: name, Addr: addr})
				}
				plan, _ := json.Marshal(cluster.PlanGroups(nodes, d.count, d.size))
				if _, err := b.SetGlobalParameter(dataGroupsParam, plan); err != nil {
					d.c.log.Warn("recording the data groups plan", zap.Error(err))
				} else {
					d.c.log.Info("planned the data groups", zap.Int("groups", d.count), zap.Int("size", d.size))
				}
			}
		}
		t.Reset(every)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.DataGroupsChanged():
		}
	}
}

// followPlanning and followPlanned are how often follow looks without a
// signal: before the plan is made (the cluster forming), and after. An
// idle node's timers are most of its idle CPU.
const (
	followPlanning = 250 * time.Millisecond
	followPlanned  = 2 * time.Second
)

// reconcile follows the plan's membership changes (ChangeGroupMember):
// the broker learns which groups this node is not a member of (it stops
// proposing publishes to them at once, and forwards them to a member),
// the groups' leaders change their Raft configurations, the groups this
// node was removed from are dropped here, and the removals known
// committed are taken out of the plan's Leaving lists.
func (d *dataGroups) reconcile(b *broker.Broker, plan []cluster.GroupSpec) {
	self := d.c.node.Name()
	changed := plan[:0:0]
	for _, s := range plan {
		if s.Has(self) {
			b.SetQuorumAway(s.ID, nil)
		} else {
			names := make([]string, len(s.Members))
			for i, m := range s.Members {
				names[i] = m.Name
			}
			b.SetQuorumAway(s.ID, names)
		}
		if s.Epoch > 0 {
			changed = append(changed, s)
		}
	}
	if len(changed) == 0 {
		return
	}
	removed, dropped := d.dg.Reconcile(changed)
	for _, g := range dropped {
		b.LeftQuorumGroup(g)
	}
	if len(removed) == 0 {
		return
	}
	err := d.editPlan(func(plan []cluster.GroupSpec) bool {
		edited := false
		for i := range plan {
			gone := removed[plan[i].ID]
			if len(gone) == 0 {
				continue
			}
			plan[i].Leaving = slices.DeleteFunc(slices.Clone(plan[i].Leaving), func(m cluster.GroupMember) bool {
				if slices.Contains(gone, m.Name) && !plan[i].Has(m.Name) {
					edited = true
					return true
				}
				return false
			})
		}
		return edited
	})
	if err != nil {
		d.c.log.Warn("recording data group removals", zap.Error(err))
	}
}

// editPlan applies edit to a copy of the current plan and records it
// (a definitions command: every node applies the same plan) when edit
// reports a change. Changes made through this node are serialized.
func (d *dataGroups) editPlan(edit func([]cluster.GroupSpec) bool) error {
	d.editMu.Lock()
	defer d.editMu.Unlock()
	plan, ok := d.current()
	if !ok {
		return errors.New("the cluster has no data groups yet (fewer nodes than --quorum-group-size)")
	}
	cp := make([]cluster.GroupSpec, len(plan))
	for i, s := range plan {
		cp[i] = s
		cp[i].Members = slices.Clone(s.Members)
		cp[i].Leaving = slices.Clone(s.Leaving)
	}
	if !edit(cp) {
		return nil
	}
	raw, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	d.mu.Lock()
	b := d.b
	d.mu.Unlock()
	_, err = b.SetGlobalParameter(dataGroupsParam, raw)
	return err
}

// ChangeGroupMember implements broker.QuorumMembership: node joins (add)
// or leaves the plan of data group g.
func (d *dataGroups) ChangeGroupMember(g uint64, node string, add bool) error {
	addr, known := d.c.meta.Members()[node]
	if add && !known {
		return fmt.Errorf("node '%s' is not a member of the cluster", node)
	}
	var failed error
	found := false
	err := d.editPlan(func(plan []cluster.GroupSpec) bool {
		for i := range plan {
			if plan[i].ID != g {
				continue
			}
			found = true
			if add {
				return plan[i].AddMember(cluster.GroupMember{Name: node, Addr: addr})
			}
			ok, err := plan[i].RemoveMember(node)
			failed = err
			return ok
		}
		return false
	})
	switch {
	case err != nil:
		return err
	case failed != nil:
		return failed
	case !found:
		return fmt.Errorf("no data group %d in the plan", g)
	}
	return nil
}

// current returns the plan as the definitions hold it now.
func (d *dataGroups) current() ([]cluster.GroupSpec, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.b == nil {
		return nil, false
	}
	v, ok := d.b.GlobalParameterValue(dataGroupsParam)
	if !ok {
		return nil, false
	}
	if string(v) != string(d.raw) {
		var plan []cluster.GroupSpec
		if err := json.Unmarshal(v, &plan); err != nil {
			d.c.log.Error("bad data groups plan", zap.Error(err))
			return nil, false
		}
		d.raw, d.plan = v, plan
	}
	return d.plan, true
}

func (d *dataGroups) close() {
	if d.dg != nil {
		if err := d.dg.Close(); err != nil {
			d.c.log.Warn("closing the data groups", zap.Error(err))
		}
	}
}

// Groups implements broker.QuorumGroups.
func (d *dataGroups) Groups() []broker.QuorumGroup {
	plan, _ := d.current()
	out := make([]broker.QuorumGroup, len(plan))
	for i, s := range plan {
		out[i].ID = s.ID
		for _, m := range s.Members {
			out[i].Members = append(out[i].Members, m.Name)
		}
	}
	return out
}

// Log implements broker.QuorumGroups.
func (d *dataGroups) Log(g uint64) broker.CommandLog {
	if d.dg == nil {
		return nil
	}
	l := d.dg.Group(g)
	if l == nil {
		// A dormant group this node is a member of starts now, on a
		// goroutine of its own (the broker may hold its locks here): a
		// queue was just placed in it. Its other members start it once
		// they see the queue (follow).
		// The plan as follow last read it: no broker lock taken here.
		d.mu.Lock()
		plan := d.plan
		d.mu.Unlock()
		for _, s := range plan {
			if s.ID == g {
				l = d.dg.Wake(s)
			}
		}
		if l == nil {
			return nil
		}
	}
	return commandLog{l}
}

// Leader implements broker.QuorumGroups.
func (d *dataGroups) Leader(g uint64) bool {
	if d.dg == nil {
		return false
	}
	l := d.dg.Group(g)
	return l != nil && l.IsLeader()
}

// LeaderName implements broker.QuorumGroups.
func (d *dataGroups) LeaderName(g uint64) string {
	if d.dg == nil {
		return ""
	}
	l := d.dg.Group(g)
	if l == nil {
		return ""
	}
	name, _ := l.Leader()
	return name
}

// Alive implements broker.QuorumGroups: this node, or a peer with a live
// session.
func (d *dataGroups) Alive(node string) bool {
	return node == d.c.node.Name() || slices.Contains(d.c.node.Peers(), node)
}
