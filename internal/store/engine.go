package store

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// reopenBackoff is the least time between two attempts to repair an engine after a
// failed write (reopen Pebble's database, cut the log back), so that a full disk is not
// hammered with recoveries.
const reopenBackoff = time.Second

// openEngine opens the store of cfg.Engine: pebble (pebble.go, absent from a build with
// the tag bifrost_nopebble) or log (log_engine.go).
func openEngine(cfg conf.Store, log *slog.Logger) (*store, error) {
	if cfg.EngineDefaulted {
		// Not set in the file: the engine that wrote the directory, else the profile's
		// default if this build has it, else the log engine.
		switch found := engineIn(cfg.Dir); {
		case found != "" && found != cfg.Engine:
			log.Info("store: store.engine is not set; opening the store the other engine wrote", "dir", cfg.Dir, "engine", found)
			cfg.Engine = found
		case found == "" && cfg.Engine == conf.EnginePebble && !pebbleBuilt:
			cfg.Engine = conf.EngineLog // -tags bifrost_nopebble
		}
	}
	switch cfg.Engine {
	case conf.EnginePebble, "":
		return openPebbleEngine(cfg, log)
	case conf.EngineLog:
		return openLog(cfg, log, nil)
	}
	return nil, fmt.Errorf("store: store.engine: unknown engine %q (want %s or %s)", cfg.Engine, conf.EnginePebble, conf.EngineLog)
}

// engineIn names the engine whose store dir holds, "" when it holds none (or does not
// exist yet).
func engineIn(dir string) string {
	names, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, d := range names {
		switch name := d.Name(); {
		case name == logName:
			return conf.EngineLog
		case pebbleFile(name):
			return conf.EnginePebble
		}
	}
	return ""
}

// leftover reports whether a file may be in a directory that holds no database yet: a
// file system's lost+found (the directory is a mount point), or what a first Open that
// was interrupted leaves before the database exists, named as Pebble names its files.
func leftover(name string) bool {
	switch {
	case name == "lost+found", name == "LOCK", strings.HasPrefix(name, "marker."):
		return true
	}
	for _, prefix := range []string{"OPTIONS-", "MANIFEST-"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			return digits(rest)
		}
	}
	if rest, ok := strings.CutSuffix(name, ".log"); ok { // a WAL: 000002.log, 000002-001.log
		return digits(strings.Replace(rest, "-", "", 1))
	}
	return false
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// pebbleFile reports whether name is a file of a Pebble database: how the log engine
// tells a directory that the pebble engine wrote, in a build with or without Pebble.
func pebbleFile(name string) bool {
	switch {
	case name == "CURRENT", leftover(name) && name != lockName && name != "lost+found":
		return true
	}
	for _, suffix := range []string{".sst", ".blob"} {
		if rest, ok := strings.CutSuffix(name, suffix); ok {
			return digits(rest)
		}
	}
	return false
}
