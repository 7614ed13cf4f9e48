package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/store"
)

// Config is what a Broker needs to run. Zero values take the defaults
// listed beside each field.
type Config struct {
	// AMQPAddr is the AMQP listen address (default ":5672").
	AMQPAddr string
	// ChannelMax is the highest channel number offered in connection.tune
	// (default 2047).
	ChannelMax uint16
	// FrameMax is the largest frame offered in connection.tune
	// (default 131072).
	FrameMax uint32
	// Heartbeat is the heartbeat interval offered in connection.tune
	// (default 60 s; a negative value offers 0, no heartbeats).
	Heartbeat time.Duration
	// MaxMessageSize is the largest message body accepted (default 128 MiB).
	MaxMessageSize uint64
	// HandshakeTimeout bounds the time from accept to connection.open-ok
	// (default 10 s).
	HandshakeTimeout time.Duration
	// OutboundCap is the number of bytes a connection may have waiting to
	// be written before its consumers stop receiving (default 1 MiB).
	OutboundCap int
	// DefaultUser and DefaultPass create the first user (default
	// guest/guest) with full permissions on DefaultVHost (default "/").
	DefaultUser, DefaultPass, DefaultVHost string
	// AMQPSAddr, when set, is the amqps (AMQP over TLS) listen address;
	// it needs TLS. RabbitMQ's port is 5671.
	AMQPSAddr string
	// TLS configures the amqps listener: certificates, and in ClientAuth
	// whether client certificates are asked for. Versions below TLS 1.2
	// are refused whatever it says.
	TLS *tls.Config
	// MaxConnections limits the open connections of the node; 0 (the
	// default) is no limit.
	MaxConnections int
	// MaxConnectionsPerVHost and MaxConnectionsPerUser limit the open
	// connections of each vhost and each user (0 = no limit).
	MaxConnectionsPerVHost, MaxConnectionsPerUser int
	// MaxQueuesPerVHost limits the queues of each vhost (0 = no limit).
	MaxQueuesPerVHost int
	// MemoryHighWatermark is the fraction of the machine's RAM the process
	// may use before the memory alarm goes on (default 0.4; negative
	// disables). MemoryHighWatermarkBytes, when set, is an absolute limit
	// instead.
	MemoryHighWatermark      float64
	MemoryHighWatermarkBytes uint64
	// DiskFreeLimit is the free space of DataDir below which the disk
	// alarm goes on (default 50 MB). DataDir empty disables the disk alarm.
	DiskFreeLimit uint64
	DataDir       string
	// ResourceCheckInterval is how often memory and disk are sampled
	// (default 200 ms).
	ResourceCheckInterval time.Duration
	// LoopbackUsers may connect only from a loopback address, as in
	// RabbitMQ (nil: ["guest"]; an empty non-nil slice: nobody).
	LoopbackUsers []string
	// Logger receives the broker's logs (default: no logging).
	Logger *zap.Logger
	// Store, when set, makes durable things durable: definitions and the
	// persistent messages of durable queues are kept in it and recovered
	// by Listen. The caller opens and closes it. Nil keeps everything in
	// memory.
	Store *store.Store
	// ConsumerTimeout is how long a delivery may stay unacknowledged
	// before its consumer is cancelled (default 30 min; negative
	// disables); a queue's x-consumer-timeout overrides it.
	ConsumerTimeout time.Duration
	// TxMaxMessages and TxMaxBytes bound what one channel's transaction
	// holds in memory until tx.commit: its publishes, and their header and
	// body bytes (defaults 100,000 and 256 MiB; TxMaxBytes is never below
	// MaxMessageSize). The publish that would exceed either closes the
	// channel with 406 PRECONDITION_FAILED and drops the transaction.
	TxMaxMessages int
	TxMaxBytes    int64
	// MaxTableDepth bounds the nesting of the field tables and arrays a
	// client sends, in method arguments and in the headers property as
	// the broker decodes it (the outermost table is depth 1); deeper
	// input closes the connection with 501 FRAME_ERROR. Default and
	// maximum amqp.MaxTableDepth (32).
	MaxTableDepth int
	// QueueMemoryMessages and QueueMemoryBytes are how many ready
	// messages, and how many bytes of their bodies, a queue keeps in RAM
	// (defaults 16384 and 16 MiB: above the 8,192 ready messages at which
	// flow control holds publishers back, so a queue whose consumers keep up
	// is not paged); beyond them bodies are paged out to the
	// store (paging.go). A sixteenth of each applies under memory
	// pressure.
	QueueMemoryMessages int
	QueueMemoryBytes    int64
	// DefinitionLog, when set, makes the log that orders definition
	// commands, given the broker they apply to (a cluster's metadata
	// group). Nil: the broker applies each command at once.
	DefinitionLog func(DefinitionMachine) DefinitionLog
	// Cluster, when set, is the cluster the node is in, for the
	// management API (clusterview.go).
	Cluster ClusterView
	// PagingRatio is the fraction of the memory high watermark above
	// which the broker is under memory pressure and pages transient
	// messages out too (default 0.5, RabbitMQ's
	// vm_memory_high_watermark_paging_ratio).
	PagingRatio float64
	// NodeName is this node's name in a cluster ("" = a single node:
	// every queue is local). With Link, a classic queue lives on the
	// node its declaration placed it on, and is reached from the others
	// over the link (link.go).
	NodeName string
	// Link reaches the other nodes' brokers (nil = a single node). The
	// node's cluster port hands the link streams peers open to
	// Broker.ServeLink.
	Link Link
	// QuorumGroups, with NodeName, reaches the cluster's data groups:
	// quorum queues are replicated in them (quorumrepl.go). Nil: quorum
	// queues live on one node.
	QuorumGroups QuorumGroups
	// BeforeAccept, when set, runs in Serve before the first connection
	// is accepted (the listener is open: clients wait in its backlog). A
	// cluster node waits there for its definitions to catch up with the
	// cluster's, so that its first clients see what was declared while it
	// was down.
	BeforeAccept func(ctx context.Context)
}

func (c *Config) setDefaults() {
	if c.AMQPAddr == "" {
		c.AMQPAddr = ":5672"
	}
	if c.ChannelMax == 0 {
		c.ChannelMax = 2047
	}
	if c.FrameMax == 0 {
		c.FrameMax = 131072
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 60 * time.Second
	}
	if c.Heartbeat < 0 {
		c.Heartbeat = 0
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 128 << 20
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.OutboundCap == 0 {
		c.OutboundCap = 1 << 20
	}
	if c.DefaultUser == "" {
		c.DefaultUser, c.DefaultPass = "guest", "guest"
	}
	if c.DefaultVHost == "" {
		c.DefaultVHost = "/"
	}
	if c.MemoryHighWatermark == 0 {
		c.MemoryHighWatermark = 0.4
	}
	if c.DiskFreeLimit == 0 {
		c.DiskFreeLimit = 50_000_000
	}
	if c.ResourceCheckInterval <= 0 {
		c.ResourceCheckInterval = 200 * time.Millisecond
	}
	if c.LoopbackUsers == nil {
		c.LoopbackUsers = []string{"guest"}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.QueueMemoryMessages <= 0 {
		c.QueueMemoryMessages = 16384
	}
	if c.QueueMemoryBytes <= 0 {
		c.QueueMemoryBytes = 16 << 20
	}
	if c.PagingRatio <= 0 {
		c.PagingRatio = 0.5
	}
	if c.ConsumerTimeout == 0 {
		c.ConsumerTimeout = 30 * time.Minute
	}
	if c.MaxTableDepth == 0 {
		c.MaxTableDepth = amqp.MaxTableDepth
	}
	if c.TxMaxMessages <= 0 {
		c.TxMaxMessages = 100_000
	}
	if c.TxMaxBytes <= 0 {
		c.TxMaxBytes = 256 << 20
	}
	c.TxMaxBytes = max(c.TxMaxBytes, int64(min(c.MaxMessageSize, 1<<62)))
}

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("broker: closed")

// Broker is a Warren server. Create it with New, start it with Serve (or
// Listen then Serve), stop it with Close.
type Broker struct {
	cfg Config
	log *zap.Logger
	// connLog is log for connections' lines (connLog in connlog.go): two
	// more caller frames skipped.
	connLog *zap.Logger

	mu     sync.Mutex
	ln     net.Listener
	tlsLn  net.Listener
	vhosts map[string]*vhost
	users  map[string]*user
	conns  map[*conn]struct{}
	closed bool
	// globals are the global runtime parameters (globals.go).
	globals map[string]*globalParam
	// startFrames caches the connection.start frame by mechanism list
	// (handshake.go).
	startFrames sync.Map

	// defMu serialises the apply of definition commands (defapply.go) so
	// that each one's store write happens in order, with no vhost lock
	// held. Lock order: defMu → vhost.mu.
	defMu sync.Mutex
	// lastID is the highest record id given to each store.Kind (defMu):
	// part of the definitions state, so that ids are assigned in the apply.
	lastID [16]uint64
	// defLog orders definition commands (defcmd.go).
	defLog DefinitionLog
	// defIndex is the log index of the command being applied by
	// ApplyDefinitionAt (0 otherwise), recorded with its store write;
	// storedApplied is the index the store held at recovery (or the last
	// snapshot restored): the commands up to it are in the stored
	// definitions already and are skipped (defreplication.go).
	defIndex      atomic.Uint64
	storedApplied atomic.Uint64
	// restoreErr says why the last definitions snapshot sent by the log
	// failed to install (nil: none failed since the last that did).
	restoreErr atomic.Pointer[string]
	// defQueued is set (defMu) while ApplyDefinitionAt applies a command
	// of a replicated log: its store write is queued, not waited for
	// (store.UpdateAppliedQueued). defStoreFailed is set once such a write
	// failed: later ones are not made (defstore.go).
	defQueued      bool
	defStoreFailed atomic.Bool
	// connIDs finds a connection by its id (mu), for the owner of an
	// exclusive queue.
	connIDs map[uint64]*conn

	// recoverOnce runs recover at the first Listen.
	recoverOnce sync.Once
	recoverErr  error

	connWG sync.WaitGroup
	nextID atomic.Uint64
	// permGen counts permission changes; channels cache publish verdicts
	// taken at one generation (access.go).
	permGen atomic.Uint64
	// channelLimits is set while a user has a max-channels limit
	// (userlimits.go).
	channelLimits atomic.Bool
	// alarm is the memory and disk alarm state (alarm.go).
	alarm alarms
	// ct is the consumer timeout clock (consumer_timeout.go).
	ct consumerTimeouts
	// reply holds the direct reply-to consumers (replyto.go).
	reply replyRegistry

	// mgmt is what the management API reads besides the entities
	// (snapshot.go).
	mgmt mgmtState
	// links are the node links: this node's to its peers, and those the
	// peers opened (link.go, linkserve.go).
	links links

	// Paging (paging.go): paging is set under memory pressure; pageIDs
	// numbers the queues that spill; pagers counts the queues' pager
	// goroutines, which start only while pagerMu (a leaf lock) finds
	// pagersClosed false.
	paging  atomic.Bool
	pageIDs atomic.Uint64
	// consumerIDs numbers the consumers of classic and quorum queues:
	// their state machines name consumers by id.
	consumerIDs  atomic.Uint64
	pagerMu      sync.Mutex
	pagersClosed bool
	pagers       sync.WaitGroup
	// drops counts the deletions of deleted queues' stored messages left
	// running by a replicated apply (applyDeleteQueue); Close waits.
	drops sync.WaitGroup

	// delayed is the delayed-message scheduler's state (delayed.go).
	delayed delayedState
	// repl is this node's side of the data groups (quorumrepl.go).
	repl replState
}

// New returns a broker with the default user and vhost. It does no I/O.
func New(cfg Config) (*Broker, error) {
	cfg.setDefaults()
	if cfg.MaxTableDepth < 1 || cfg.MaxTableDepth > amqp.MaxTableDepth {
		return nil, fmt.Errorf("broker: MaxTableDepth %d is not within 1..%d", cfg.MaxTableDepth, amqp.MaxTableDepth)
	}
	b := &Broker{
		cfg:     cfg,
		log:     cfg.Logger,
		connLog: cfg.Logger.WithOptions(zap.AddCallerSkip(2)),
		vhosts:  make(map[string]*vhost),
		users:   make(map[string]*user),
		conns:   make(map[*conn]struct{}),
		connIDs: make(map[uint64]*conn),
	}
	b.repl.init(cfg.NodeName)
	// The default vhost, user and permission are the first of their kinds:
	// id 1 each, on every node.
	v := newVHost(b, cfg.DefaultVHost)
	v.storeID = 1
	b.vhosts[cfg.DefaultVHost] = v
	hash, err := HashPassword(HashSHA256, cfg.DefaultPass)
	if err != nil {
		return nil, err
	}
	u := &user{name: cfg.DefaultUser, hash: hash, algorithm: HashSHA256, tags: []string{"administrator"}, storeID: 1}
	u.setPermission(cfg.DefaultVHost, permission{configure: ".*", write: ".*", read: ".*", storeID: 1})
	b.users[cfg.DefaultUser] = u
	b.lastID[store.KindVHost], b.lastID[store.KindUser], b.lastID[store.KindPermission] = 1, 1, 1
	b.delayed.wake = make(chan struct{}, 1)
	b.delayed.confirmed = make(chan struct{}, 1)
	b.defLog = localDefinitionLog{b}
	if cfg.DefinitionLog != nil {
		b.defLog = cfg.DefinitionLog(b)
	}
	b.alarm.changed = make(chan struct{}, 1)
	b.alarm.memFraction = cfg.MemoryHighWatermark
	b.alarm.memBytes = cfg.MemoryHighWatermarkBytes
	b.alarm.diskLimit = cfg.DiskFreeLimit
	// The consumer timeout clock runs from here, not from when Serve's
	// checker first runs: a delivery stamped with 0 could never time out.
	b.ct.now.Store(nowMs())
	if cfg.Store != nil {
		cfg.Store.OnAppendFailure(b.appendFailed)
	}
	return b, nil
}

// Listen binds the AMQP listener. Serve calls it when it has not been
// called; call it first to learn Addr before serving.
func (b *Broker) Listen() error {
	b.recoverOnce.Do(func() { b.recoverErr = b.recover() })
	if b.recoverErr != nil {
		return b.recoverErr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if b.ln != nil {
		return nil
	}
	if b.cfg.AMQPSAddr != "" && b.cfg.TLS == nil {
		return errors.New("broker: AMQPSAddr needs a TLS configuration")
	}
	ln, err := net.Listen("tcp", b.cfg.AMQPAddr)
	if err != nil {
		return err
	}
	if b.cfg.AMQPSAddr != "" {
		tln, err := net.Listen("tcp", b.cfg.AMQPSAddr)
		if err != nil {
			_ = ln.Close()
			return err
		}
		b.tlsLn = tln
	}
	b.ln = ln
	return nil
}

// AMQPSAddr is the bound amqps address, or nil before Listen or without
// Config.AMQPSAddr.
func (b *Broker) AMQPSAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tlsLn == nil {
		return nil
	}
	return b.tlsLn.Addr()
}

// Addr is the bound AMQP address, or nil before Listen.
func (b *Broker) Addr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ln == nil {
		return nil
	}
	return b.ln.Addr()
}

// Serve accepts AMQP (and amqps) connections until ctx is done or Close is
// called; then it returns ErrClosed once every connection has ended (see
// Close). It runs the resource monitor (alarm.go) meanwhile.
func (b *Broker) Serve(ctx context.Context) error {
	if err := b.Listen(); err != nil {
		return err
	}
	b.mu.Lock()
	ln, tln := b.ln, b.tlsLn
	b.mu.Unlock()
	b.log.Info("amqp listener started", zap.Stringer("addr", ln.Addr()))
	stop := context.AfterFunc(ctx, func() { _ = b.Close() })
	defer stop()
	var wg sync.WaitGroup
	monStop := make(chan struct{})
	wg.Go(func() { b.monitorResources(monStop) })
	wg.Go(func() { b.monitorConsumerTimeouts(monStop) })
	b.startRepl()
	defer func() {
		close(monStop)
		wg.Wait()
	}()
	if b.cfg.BeforeAccept != nil {
		b.cfg.BeforeAccept(ctx)
	}
	// The delayed-message scheduler routes through the definitions: it
	// starts once they caught up, as clients do.
	wg.Go(func() { b.runDelayed(monStop) })
	if tln != nil {
		b.log.Info("amqps listener started", zap.Stringer("addr", tln.Addr()))
		tlsCfg := serverTLSConfig(b.cfg.TLS)
		wg.Go(func() {
			if err := b.accept(tln, tlsCfg); !errors.Is(err, ErrClosed) {
				b.log.Error("amqps listener failed", zap.Error(err))
			}
		})
	}
	err := b.accept(ln, nil)
	if !errors.Is(err, ErrClosed) {
		// A failed listener ends the broker: the other listener and the
		// monitor must stop before Serve returns.
		_ = b.Close()
	}
	return err
}

// accept accepts connections on ln, over TLS when tlsCfg is set, until
// the broker closes; then it returns ErrClosed once every connection has
// ended.
func (b *Broker) accept(ln net.Listener, tlsCfg *tls.Config) error {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			b.mu.Lock()
			closed := b.closed
			b.mu.Unlock()
			if closed {
				// Close may be running on another goroutine (ctx's):
				// return only once every connection has ended, so that
				// a caller exiting after Serve does not cut them short.
				b.connWG.Wait()
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if tlsCfg != nil {
			nc = tls.Server(nc, tlsCfg)
		}
		b.serveConn(nc)
	}
}

// serveConn runs a connection on nc in a goroutine of its own, counted in
// connWG; after Close it just closes nc. The accept loop does no more than
// start the goroutine, which builds the connection.
func (b *Broker) serveConn(nc net.Conn) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = nc.Close()
		return
	}
	b.connWG.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.connWG.Done()
		c := newConn(b, nc)
		b.mu.Lock()
		if b.closed {
			// Close ran meanwhile and did not see this connection.
			b.mu.Unlock()
			_ = nc.Close()
			return
		}
		b.conns[c] = struct{}{}
		b.connIDs[c.id] = c
		b.mu.Unlock()
		b.mgmt.connsOpened.Add(1)
		c.serve()
		b.mu.Lock()
		delete(b.conns, c)
		delete(b.connIDs, c.id)
		b.mu.Unlock()
		b.mgmt.removeConn(c)
	}()
}

// Close stops accepting, sends connection.close 320 CONNECTION_FORCED to
// every client, waits briefly for them to answer, and returns when every
// connection has ended.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.connWG.Wait()
		return nil
	}
	b.closed = true
	ln, tln := b.ln, b.tlsLn
	conns := make([]*conn, 0, len(b.conns))
	for c := range b.conns {
		conns = append(conns, c)
	}
	b.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	if tln != nil {
		_ = tln.Close()
	}
	for _, c := range conns {
		c.forceClose("broker forced connection closure with reason 'shutdown'")
	}
	b.connWG.Wait()
	b.closeRepl()
	b.closeLinks()
	b.stopStreams()
	b.pagerMu.Lock()
	b.pagersClosed = true
	b.pagerMu.Unlock()
	b.pagers.Wait()
	b.drops.Wait()
	return nil
}

// vhost returns the named virtual host or nil.
func (b *Broker) vhost(name string) *vhost {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.vhosts[name]
}
