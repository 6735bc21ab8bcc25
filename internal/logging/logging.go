// Package logging builds bifrost's structured logger from the log section of the config
// (logging.go), and limits the lines of errors that repeat in a loop (limit.go).
//
// Every part logs through one *slog.Logger handed down from the broker; none calls the
// slog default. The level lives in a *slog.LevelVar so that a live reload can change it
// without rebuilding the handler chain or the loggers derived from it with With.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// New returns a logger writing to w in cfg.Format ("json", or text for anything else) at
// cfg.Level, and the LevelVar that controls it: Set on it takes effect at once for every
// logger derived from the returned one. An unknown level falls back to info; conf.Validate
// is where a bad level is reported.
func New(cfg conf.Log, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	if l, err := ParseLevel(cfg.Level); err == nil {
		level.Set(l)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if strings.EqualFold(cfg.Format, "json") {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h), level
}

// ParseLevel maps a config level name (debug, info, warn, error; any case) to a slog.Level.
// The empty string is info, the default.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("logging: unknown level %q (want debug, info, warn or error)", s)
}
