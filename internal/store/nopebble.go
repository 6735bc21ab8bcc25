//go:build bifrost_nopebble

package store

import (
	"fmt"
	"log/slog"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// pebbleBuilt: this build was made with -tags bifrost_nopebble and has no pebble engine.
const pebbleBuilt = false

// openPebbleEngine fails: the pebble engine is not in this build.
func openPebbleEngine(conf.Store, *slog.Logger) (*store, error) {
	return nil, fmt.Errorf("store: store.engine: %s is not in this build, which was made with -tags bifrost_nopebble; set store.engine: %s, or use a build without that tag",
		conf.EnginePebble, conf.EngineLog)
}
