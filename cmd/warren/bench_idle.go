package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// idleConfig is `warren bench idle`: the CPU time and resident memory of
// running processes (the nodes of an idle cluster) over Duration, read from
// /proc/PID/stat and /proc/PID/status. Linux only.
type idleConfig struct {
	PIDs     []int
	Names    []string // one per PID, for the report; default "pid N"
	Duration time.Duration
	Interval time.Duration // between RSS samples
	Proc     string        // the proc file system, "/proc"
	Out      io.Writer
}

// idleProc is one process over the run: CPU is in percent of one core,
// RSS in bytes.
type idleProc struct {
	Name         string
	PID          int
	CPU          float64
	RSS, RSSMax  uint64 // at the end, and the largest sample
	RSSMean      float64
	CPUTicksUsed uint64 // user + system clock ticks over the run
}

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture Go supports (sysconf(_SC_CLK_TCK)).
const userHZ = 100

// procCPUTicks parses /proc/PID/stat's content and returns utime + stime in
// clock ticks. The command name (field 2) may hold spaces and parentheses,
// so the fields are counted from its closing parenthesis, the last one.
func procCPUTicks(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	u, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: utime: %w", err)
	}
	s, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: stime: %w", err)
	}
	return u + s, nil
}

// procRSS parses /proc/PID/status's content and returns VmRSS in bytes.
func procRSS(status []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: VmRSS %q", v)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: VmRSS: %w", err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("status: no VmRSS (a kernel thread, or a zombie)")
}

func (cfg *idleConfig) read(pid int) (ticks, rss uint64, err error) {
	stat, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", cfg.Proc, pid))
	if err != nil {
		return 0, 0, err
	}
	status, err := os.ReadFile(fmt.Sprintf("%s/%d/status", cfg.Proc, pid))
	if err != nil {
		return 0, 0, err
	}
	if ticks, err = procCPUTicks(stat); err != nil {
		return 0, 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	if rss, err = procRSS(status); err != nil {
		return 0, 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return ticks, rss, nil
}

// runIdle samples every process at the start, every Interval and at the
// end of Duration (or when ctx is done); a process that exits fails the run.
func runIdle(ctx context.Context, cfg idleConfig) ([]idleProc, error) {
	switch {
	case len(cfg.PIDs) == 0:
		return nil, errors.New("idle needs at least one --pid")
	case len(cfg.Names) != 0 && len(cfg.Names) != len(cfg.PIDs):
		return nil, fmt.Errorf("%d --name for %d --pid", len(cfg.Names), len(cfg.PIDs))
	case cfg.Duration <= 0:
		return nil, errors.New("--duration: want a positive duration")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Proc == "" {
		cfg.Proc = "/proc"
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	procs := make([]idleProc, len(cfg.PIDs))
	first := make([]uint64, len(cfg.PIDs))
	var samples uint64
	sample := func() error {
		samples++
		for i, pid := range cfg.PIDs {
			ticks, rss, err := cfg.read(pid)
			if err != nil {
				return err
			}
			p := &procs[i]
			if samples == 1 {
				first[i] = ticks
			}
			p.CPUTicksUsed = ticks - first[i]
			p.RSS, p.RSSMax = rss, max(p.RSSMax, rss)
			p.RSSMean += (float64(rss) - p.RSSMean) / float64(samples)
		}
		return nil
	}
	for i, pid := range cfg.PIDs {
		procs[i].PID, procs[i].Name = pid, fmt.Sprintf("pid %d", pid)
		if len(cfg.Names) != 0 {
			procs[i].Name = cfg.Names[i]
		}
	}
	start := time.Now()
	if err := sample(); err != nil {
		return nil, err
	}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	end := time.NewTimer(cfg.Duration)
	defer end.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-end.C:
			done = true
		case <-tick.C:
			fmt.Fprintf(cfg.Out, "time %.0fs\n", time.Since(start).Seconds())
		}
		if err := sample(); err != nil {
			return nil, err
		}
	}
	elapsed := time.Since(start).Seconds()
	for i := range procs {
		procs[i].CPU = float64(procs[i].CPUTicksUsed) / userHZ / elapsed * 100
	}
	return procs, nil
}
