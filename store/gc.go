package store

import (
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"
)

// gcDiscardRatio: a value-log file is rewritten when at least half of it is garbage.
const gcDiscardRatio = 0.5

// gcLoop runs value-log GC every interval until stop, so the disk space of drained
// queues' large bodies comes back. Each run rewrites files until Badger finds none
// worth rewriting.
func (s *Store) gcLoop(interval time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
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
