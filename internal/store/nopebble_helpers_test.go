//go:build bifrost_nopebble

package store

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// openPebbleHooked fails: testEngines has no pebble in this build.
func openPebbleHooked(conf.Store, *slog.Logger, *hooks) (*store, error) {
	return nil, errors.New("store: no pebble engine in this build")
}

func setPebbleBackoff(engine, time.Duration) {}

// storeFormatRecord is never asked: testEngines has no pebble in this build.
func storeFormatRecord(t *testing.T, _ string) byte {
	t.Helper()
	t.Fatal("no pebble engine in this build")
	return 0
}
