package broker

import (
	"bufio"
	"os"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/warrenmq/warren/amqp"
)

// Flow control by resource alarms, as RabbitMQ's memory and disk alarms:
// one goroutine, owned by Serve, samples the Go runtime's memory and the
// free space of the data directory every Config.ResourceCheckInterval.
// While an alarm is on, a connection that publishes stops reading its
// socket right after that publish (conn.throttle), after telling
// clients that advertise the connection.blocked capability why; its
// deliveries keep being written. connection.unblocked follows when every
// alarm has cleared.

// Alarm names, as Broker.Alarms reports them.
const (
	AlarmMemory = "memory"
	AlarmDisk   = "disk"
)

// alarms is the broker's alarm state. mu is a leaf lock.
type alarms struct {
	// on is set while any alarm is on: the readers' cheap check.
	on atomic.Bool

	mu     sync.Mutex
	memory bool
	disk   bool
	// cleared is closed when the last alarm clears; a fresh one is made
	// when an alarm goes on.
	cleared chan struct{}
	// memFraction, memBytes and diskLimit are the thresholds, settable at
	// run time.
	memFraction float64
	memBytes    uint64
	diskLimit   uint64
	// changed wakes the monitor when a threshold changes.
	changed chan struct{}
}

// resourceFarFactor is how many ResourceCheckIntervals the monitor waits
// between samples while memory and disk are far from their thresholds
// (memory under half of the paging threshold, disk free over twice its
// limit and a GiB more): RabbitMQ's disk monitor also samples less often
// the further the free space is from its limit. An idle broker's timers
// are most of its idle CPU.
const resourceFarFactor = 5

// resourceFarDisk is the free space above twice the limit below which the
// disk counts as near it.
const resourceFarDisk = 1 << 30

// Alarms lists the alarms that are on: AlarmMemory, AlarmDisk.
func (b *Broker) Alarms() []string {
	a := &b.alarm
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	if a.memory {
		out = append(out, AlarmMemory)
	}
	if a.disk {
		out = append(out, AlarmDisk)
	}
	sort.Strings(out)
	return out
}

// SetMemoryHighWatermark changes the memory threshold at run time: bytes
// when non-zero, else fraction of the machine's RAM. It takes effect at
// the next sample.
func (b *Broker) SetMemoryHighWatermark(fraction float64, bytes uint64) {
	a := &b.alarm
	a.mu.Lock()
	a.memFraction, a.memBytes = fraction, bytes
	a.mu.Unlock()
	a.wake()
}

// wake has the monitor sample now.
func (a *alarms) wake() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// SetDiskFreeLimit changes the disk free space threshold at run time.
func (b *Broker) SetDiskFreeLimit(bytes uint64) {
	a := &b.alarm
	a.mu.Lock()
	a.diskLimit = bytes
	a.mu.Unlock()
	a.wake()
}

// blockedBy returns the reason for connection.blocked and a channel closed
// when the alarms clear, or nil when none is on.
func (b *Broker) blockedBy() (string, <-chan struct{}) {
	a := &b.alarm
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.memory && a.disk:
		return "low on memory and disk", a.cleared
	case a.memory:
		return "low on memory", a.cleared
	case a.disk:
		return "low on disk", a.cleared
	}
	return "", nil
}

// setAlarms records the sampled state and wakes blocked readers when the
// last alarm clears.
func (b *Broker) setAlarms(memory, disk bool) {
	a := &b.alarm
	a.mu.Lock()
	wasOn := a.memory || a.disk
	changedMem, changedDisk := a.memory != memory, a.disk != disk
	a.memory, a.disk = memory, disk
	isOn := memory || disk
	switch {
	case isOn && !wasOn:
		a.cleared = make(chan struct{})
	case !isOn && wasOn:
		close(a.cleared)
		a.cleared = nil
	}
	a.on.Store(isOn)
	a.mu.Unlock()
	if changedMem {
		b.log.Warn("memory alarm", zap.Bool("on", memory))
	}
	if changedDisk {
		b.log.Warn("disk alarm", zap.Bool("on", disk))
	}
}

// monitorResources samples memory and disk until stop is closed: every
// ResourceCheckInterval near a threshold, resourceFarFactor times that far
// from them, and at once when a threshold changes. It is the goroutine
// Serve starts and waits for.
func (b *Broker) monitorResources(stop <-chan struct{}) {
	t := time.NewTimer(b.cfg.ResourceCheckInterval)
	defer t.Stop()
	ram := totalMemory()
	samples := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	for {
		every := b.cfg.ResourceCheckInterval
		if !b.checkResources(ram, samples) {
			every *= resourceFarFactor
		}
		t.Reset(every)
		select {
		case <-stop:
			return
		case <-t.C:
		case <-b.alarm.changed:
		}
	}
}

// checkResources samples memory and disk, sets the alarms and the paging
// pressure, and reports whether either is near its threshold.
func (b *Broker) checkResources(ram uint64, samples []metrics.Sample) (near bool) {
	a := &b.alarm
	a.mu.Lock()
	fraction, limit, diskLimit := a.memFraction, a.memBytes, a.diskLimit
	a.mu.Unlock()
	if limit == 0 && ram > 0 && fraction > 0 {
		limit = uint64(fraction * float64(ram))
	}
	memory, pressure := false, false
	if limit > 0 {
		metrics.Read(samples)
		var used uint64
		if samples[0].Value.Kind() == metrics.KindUint64 {
			used = samples[0].Value.Uint64()
		}
		if samples[1].Value.Kind() == metrics.KindUint64 {
			used -= min(used, samples[1].Value.Uint64())
		}
		memory = used >= limit
		pressure = float64(used) >= b.cfg.PagingRatio*float64(limit)
		near = float64(used) >= b.cfg.PagingRatio/2*float64(limit)
	}
	if b.paging.Swap(pressure) != pressure {
		b.log.Info("memory pressure: paging transient messages out", zap.Bool("on", pressure))
	}
	if pressure {
		b.pageOutAll()
	}
	disk := false
	if dir := b.cfg.DataDir; dir != "" && diskLimit > 0 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			free := uint64(st.Bavail) * uint64(st.Bsize)
			disk = free < diskLimit
			near = near || free < 2*diskLimit+resourceFarDisk
		}
	}
	b.setAlarms(memory, disk)
	return near || memory || disk || pressure
}

// totalMemory is the machine's RAM in bytes (Linux /proc/meminfo), or 0
// when unknown, which disables the relative memory watermark.
func totalMemory() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// throttle blocks the reader of a connection that has just published while
// an alarm is on, until the alarms clear or the connection closes, as
// RabbitMQ blocks a connection at its first publish during an alarm (other
// connections keep reading: acks and consumes go on). Clients with the
// connection.blocked capability are told. Reader goroutine, between frames.
func (c *conn) throttle() {
	if !c.published {
		return
	}
	c.published = false
	if !c.b.alarm.on.Load() || c.closing.Load() {
		return
	}
	reason, cleared := c.b.blockedBy()
	if cleared == nil {
		return
	}
	c.flushConfirms()
	if c.capBlocked {
		c.send(0, &amqp.ConnectionBlocked{Reason: reason})
	}
	c.log.Info("connection blocked", zap.String("reason", reason))
	c.blocked.Store(true)
	select {
	case <-cleared:
	case <-c.closeSig:
	case <-c.writerDone:
	}
	// The peer's heartbeats went unread while blocked.
	c.lastRead.Store(time.Now().UnixNano())
	c.blocked.Store(false)
	if c.capBlocked && !c.closing.Load() {
		c.send(0, &amqp.ConnectionUnblocked{})
	}
	c.log.Info("connection unblocked")
}
