package store

import (
	"fmt"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"go.uber.org/zap"
)

// badgerOptions is Badger tuned for a small footprint; doc.go explains each choice.
func badgerOptions(dir string, noSync bool, log *zap.Logger) badger.Options {
	return badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log.Named("badger").Sugar()}).
		WithLoggingLevel(badger.WARNING).
		WithSyncWrites(!noSync).
		WithMemTableSize(2 << 20).
		WithNumMemtables(3).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(12).
		WithBaseTableSize(512 << 10).
		WithBaseLevelSize(16 << 20).
		WithValueThreshold(512).
		WithValueLogFileSize(64 << 20).
		WithNumCompactors(2).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithMetricsEnabled(false).
		WithDetectConflicts(false).
		WithNumGoroutines(2)
}

// badgerLogger passes Badger's errors and warnings to zap and drops the rest.
type badgerLogger struct{ l *zap.SugaredLogger }

func (b badgerLogger) Errorf(f string, args ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, args...)))
}

func (b badgerLogger) Warningf(f string, args ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, args...)))
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
