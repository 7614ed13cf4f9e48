package store

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// gcDiscardRatio: a value-log file is rewritten when at least half of it is garbage.
const gcDiscardRatio = 0.5

// gcCheckInterval is how often the GC goroutine counts the value-log files, and
// gcEarlyFiles how many there may be before GC runs without waiting for its interval:
// a steady stream of large bodies consumed at once writes a 64 MiB file every few
// seconds, all garbage soon after, and a minute of it is gigabytes on disk.
const (
	gcCheckInterval = 5 * time.Second
	gcEarlyFiles    = 4
)

// gcLoop runs value-log GC every interval, or sooner once there are more than
// gcEarlyFiles value-log files, until stop, so the disk space of drained queues' large
// bodies comes back. Each run rewrites files until Badger finds none worth rewriting.
func (s *Store) gcLoop(interval time.Duration) {
	defer s.wg.Done()
	check := min(interval, gcCheckInterval)
	t := time.NewTicker(check)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if time.Since(last) < interval-check/2 && s.valueLogFiles() <= gcEarlyFiles {
			continue
		}
		last = time.Now()
		s.gcRuns.Add(1)
		for {
			err := s.db.RunValueLogGC(gcDiscardRatio)
			if err != nil {
				if !errors.Is(err, badger.ErrNoRewrite) && !errors.Is(err, badger.ErrRejected) {
					s.log.Warn("value-log GC failed", zap.Error(err))
				}
				break
			}
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}
}

// valueLogFiles counts the value-log files in the data directory.
func (s *Store) valueLogFiles() int {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".vlog") {
			n++
		}
	}
	return n
}
