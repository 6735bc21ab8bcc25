//go:build bifrost_nopebble

package store

import (
	"strings"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// TestPebbleNotBuilt: in a build without Pebble, store.engine: pebble (or no engine, the
// server profile's default) fails at Open, naming the setting and the tag.
func TestPebbleNotBuilt(t *testing.T) {
	for _, engine := range []string{conf.EnginePebble, ""} {
		_, err := Open(testConfigEngine(engine, t.TempDir(), conf.SyncAlways), testLogger(t))
		if err == nil {
			t.Fatalf("engine %q: Open succeeded without Pebble", engine)
		}
		for _, w := range []string{"store.engine: pebble", "bifrost_nopebble", "store.engine: log"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("engine %q: error %q does not say %q", engine, err, w)
			}
		}
	}
}
