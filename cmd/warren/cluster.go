package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"go.uber.org/zap"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/cluster"
	"github.com/warrenmq/warren/store"
)

// metadataLogID is the store log of the metadata group's Raft log.
const metadataLogID = 1 << 32

// clusterFlags are the flags of clustering, which is on when a cluster
// secret file is given.
func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "node-name", EnvVars: []string{"WARREN_NODE_NAME"}, Usage: "this node's name in the cluster (default warren@<hostname>)"},
		&cli.StringFlag{Name: "cluster-addr", EnvVars: []string{"WARREN_CLUSTER_ADDR"}, Usage: "cluster port listen address (default :25672 when clustering is on)"},
		&cli.StringFlag{Name: "cluster-advertise", EnvVars: []string{"WARREN_CLUSTER_ADVERTISE"}, Usage: "cluster address other nodes reach this node at (default: the listen address, with the host name)"},
		&cli.StringFlag{Name: "join", EnvVars: []string{"WARREN_JOIN"}, Usage: "comma-separated cluster addresses of nodes of the cluster to join (empty: found a new cluster)"},
		&cli.StringFlag{Name: "cluster-secret-file", EnvVars: []string{"WARREN_CLUSTER_SECRET_FILE"}, Usage: "file holding the secret shared by the cluster's nodes (mode 0600; setting it turns clustering on)"},
		&cli.StringFlag{Name: "cluster-id", Value: "warren", EnvVars: []string{"WARREN_CLUSTER_ID"}, Usage: "cluster name: nodes of other clusters are refused"},
		&cli.StringFlag{Name: "cluster-tls-cert", EnvVars: []string{"WARREN_CLUSTER_TLS_CERT"}, Usage: "PEM certificate of this node for mutual TLS on the cluster port (empty: no TLS)"},
		&cli.StringFlag{Name: "cluster-tls-key", EnvVars: []string{"WARREN_CLUSTER_TLS_KEY"}, Usage: "PEM private key of --cluster-tls-cert"},
		&cli.StringFlag{Name: "cluster-tls-ca", EnvVars: []string{"WARREN_CLUSTER_TLS_CA"}, Usage: "PEM CA certificates that sign the nodes' certificates"},
		&cli.DurationFlag{Name: "cluster-propose-timeout", Value: 5 * time.Second, EnvVars: []string{"WARREN_CLUSTER_PROPOSE_TIMEOUT"}, Usage: "how long a definition change waits for the metadata group before it is refused"},
		&cli.Uint64Flag{Name: "cluster-snapshot-threshold", Value: 8192, EnvVars: []string{"WARREN_CLUSTER_SNAPSHOT_THRESHOLD"}, Usage: "metadata log entries between snapshots"},
		&cli.Uint64Flag{Name: "cluster-trailing-logs", Value: 10240, EnvVars: []string{"WARREN_CLUSTER_TRAILING_LOGS"}, Usage: "metadata log entries kept behind a snapshot, for nodes that lag"},
	}
}

// clustered is one node's cluster membership: its port and the metadata
// group.
type clustered struct {
	node  *cluster.Node
	meta  *cluster.RaftLog
	link  *cluster.BrokerLink
	join  []string
	start time.Time
	log   *zap.Logger
	// groups is the node's data groups (cluster_quorum.go), nil when off;
	// wg counts the goroutines following their plan.
	groups *dataGroups
	wg     sync.WaitGroup
}

// newClustered starts the node's cluster port when clustering is on (nil
// when it is off). The metadata group is made by definitionLog, when the
// broker is built, and started by start.
func newClustered(cc *cli.Context, log *zap.Logger) (*clustered, error) {
	secret := cc.String("cluster-secret-file")
	if secret == "" {
		if cc.String("join") != "" || cc.String("cluster-addr") != "" {
			return nil, errors.New("clustering needs --cluster-secret-file")
		}
		return nil, nil
	}
	cfg := cluster.Config{
		ClusterID:   cc.String("cluster-id"),
		NodeName:    cc.String("node-name"),
		ClusterAddr: cc.String("cluster-addr"),
		Advertise:   cc.String("cluster-advertise"),
		SecretFile:  secret,
		Logger:      log,
	}
	for _, s := range strings.Split(cc.String("join"), ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Join = append(cfg.Join, s)
		}
	}
	if cc.String("cluster-tls-cert") != "" {
		t, err := clusterTLS(cc.String("cluster-tls-cert"), cc.String("cluster-tls-key"), cc.String("cluster-tls-ca"))
		if err != nil {
			return nil, err
		}
		cfg.TLS = t
	}
	n, err := cluster.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.Start(); err != nil {
		return nil, err
	}
	return &clustered{node: n, join: cfg.Join, start: time.Now(), log: log}, nil
}

// clusterTLS is the cluster port's mutual TLS configuration.
func clusterTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	if keyFile == "" || caFile == "" {
		return nil, errors.New("--cluster-tls-cert needs --cluster-tls-key and --cluster-tls-ca")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS certificate: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("cluster TLS CA %s: no PEM certificate found", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// definitionLog returns broker.Config.DefinitionLog: the metadata group
// over the broker's definitions.
func (c *clustered) definitionLog(cc *cli.Context, st *store.Store, errp *error) func(broker.DefinitionMachine) broker.DefinitionLog {
	return func(m broker.DefinitionMachine) broker.DefinitionLog {
		l, err := cluster.NewRaftLog(cluster.RaftLogConfig{
			Node:              c.node,
			Group:             cluster.MetadataGroup,
			Store:             st,
			LogID:             metadataLogID,
			SnapshotDir:       filepath.Join(cc.String("data-dir"), "raft", "metadata"),
			Machine:           machine{broker.DefinitionStateMachine(m)},
			ProposeTimeout:    cc.Duration("cluster-propose-timeout"),
			SnapshotThreshold: cc.Uint64("cluster-snapshot-threshold"),
			TrailingLogs:      cc.Uint64("cluster-trailing-logs"),
			Info:              c.info,
			Logger:            c.log,
		})
		if err != nil {
			*errp = err
			return nil
		}
		c.meta = l
		return broker.CommandDefinitionLog(commandLog{l})
	}
}

// machine is a broker.StateMachine as the cluster's StateMachine (the
// cluster package does not import the broker; the two interfaces differ
// only in their snapshot type's name).
type machine struct{ broker.StateMachine }

func (m machine) Snapshot() (cluster.StateSnapshot, error) { return m.StateMachine.Snapshot() }

// commandLog is a cluster.RaftLog as a broker.CommandLog.
type commandLog struct{ l *cluster.RaftLog }

func (c commandLog) Propose(ctx context.Context, cmd []byte) (broker.Applied, error) {
	a, err := c.l.Propose(ctx, cmd)
	return broker.Applied{Index: a.Index, Result: a.Result}, err
}

// Sync brings this node's definitions up to date with the cluster's
// (broker.DefinitionSyncer, through broker.CommandDefinitionLog).
func (c commandLog) Sync(ctx context.Context) error { return c.l.Sync(ctx) }

// AwaitPeers waits until the other nodes applied index (definition
// changes, through broker.CommandDefinitionLog).
func (c commandLog) AwaitPeers(ctx context.Context, index uint64) { c.l.AwaitPeers(ctx, index) }

// Begin implements broker.PipelineLog.
func (c commandLog) Begin(buf []byte, committed func()) (func() (broker.Applied, error), bool) {
	wait, ok := c.l.BeginFramed(buf, committed)
	if !ok {
		return nil, false
	}
	return func() (broker.Applied, error) {
		a, err := wait()
		return broker.Applied{Index: a.Index, Result: a.Result}, err
	}, true
}

// Headroom implements broker.PipelineLog.
func (commandLog) Headroom() int { return cluster.CommandHeadroom }

func (c commandLog) ProposeFunc(cmd []byte, done func(broker.Applied, error)) {
	c.l.ProposeFunc(cmd, func(a cluster.Applied, err error) { done(broker.Applied{Index: a.Index, Result: a.Result}, err) })
}

// info is this node's status for the other nodes (cluster_status,
// /api/nodes).
func (c *clustered) info() []byte {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, _ := json.Marshal(map[string]any{
		"name":     c.node.Name(),
		"uptime":   time.Since(c.start).Milliseconds(),
		"mem_used": ms.Sys - ms.HeapReleased,
		"peers":    c.node.Peers(),
	})
	return b
}

// run starts the metadata group once the broker has recovered its
// definitions: a node without --join founds the cluster (its definitions
// are the cluster's first state); one with --join asks the seeds to add it,
// retrying in the background until it is added.
func (c *clustered) run(ctx context.Context) error {
	if err := c.meta.Start(len(c.join) == 0); err != nil {
		return err
	}
	if len(c.join) > 0 {
		go func() {
			if err := c.meta.Join(ctx, c.join); err != nil && ctx.Err() == nil {
				c.log.Error("joining the cluster failed", zap.Error(err))
			}
		}()
	}
	return nil
}

// catchUpLimit bounds how long a starting node waits for its definitions
// to catch up before it serves clients anyway.
const catchUpLimit = 20 * time.Second

// catchUp is broker.Config.BeforeAccept: it waits until this node has
// applied every definition the cluster had committed, so that a node back
// from an outage does not answer its first clients from stale definitions
// (a queue declared meanwhile would be NOT_FOUND). Without a quorum it
// gives up after catchUpLimit and serves what it has.
func (c *clustered) catchUp(ctx context.Context) {
	if c == nil || c.meta == nil {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, catchUpLimit)
	defer cancel()
	for {
		err := c.meta.CatchUp(ctx)
		if err == nil {
			c.log.Info("definitions caught up with the cluster", zap.Duration("took", time.Since(start)))
			return
		}
		if errors.Is(err, cluster.ErrClosed) {
			return
		}
		select {
		case <-ctx.Done():
			c.log.Warn("serving clients before the definitions caught up with the cluster", zap.Duration("waited", time.Since(start)), zap.Error(err))
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// close stops the data groups, the metadata group and the cluster port.
func (c *clustered) close() {
	c.wg.Wait()
	if c.groups != nil {
		c.groups.close()
	}
	if c.meta != nil {
		if err := c.meta.Close(); err != nil {
			c.log.Warn("closing the metadata group", zap.Error(err))
		}
	}
	_ = c.node.Close()
}

var (
	_ broker.ClusterView       = (*clustered)(nil)
	_ broker.ClusterMembership = (*clustered)(nil)
)

// NodeName implements broker.ClusterView.
func (c *clustered) NodeName() string { return c.node.Name() }

// ClusterNodes implements broker.ClusterView: the metadata group's members,
// each asked for its status.
func (c *clustered) ClusterNodes(ctx context.Context) ([]broker.ClusterNode, error) {
	timeout := 2 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	ms, err := c.meta.Status(timeout)
	if err != nil {
		return nil, err
	}
	out := make([]broker.ClusterNode, len(ms))
	var down []string
	for _, m := range ms {
		if !m.Running {
			down = append(down, m.Name)
		}
	}
	for i, m := range ms {
		n := broker.ClusterNode{Name: m.Name, Addr: m.Addr, Running: m.Running, MetadataLeader: m.Leader, Partitions: []string{}}
		var info struct {
			Uptime  int64  `json:"uptime"`
			MemUsed uint64 `json:"mem_used"`
		}
		if m.Info != nil && json.Unmarshal(m.Info, &info) == nil {
			n.Uptime, n.MemUsed = info.Uptime, info.MemUsed
		}
		if m.Name == c.node.Name() && down != nil {
			n.Partitions = down
		}
		out[i] = n
	}
	return out, nil
}

// JoinCluster implements broker.ClusterMembership.
func (c *clustered) JoinCluster(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.meta.Join(ctx, []string{addr})
}

// LeaveCluster implements broker.ClusterMembership.
func (c *clustered) LeaveCluster(_ context.Context, name string) error {
	if name == "" {
		name = c.node.Name()
	}
	return c.meta.Remove(name)
}
