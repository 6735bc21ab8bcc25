package main

import (
	"errors"
	"log/slog"
	"slices"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
)

// reload re-reads the config file on SIGHUP and applies what this version applies live:
// log.level. The whole file is checked first, against running (the config the broker was
// started with); when it is invalid or changes a field that needs a restart, nothing is
// applied. Other live fields that changed are listed as not applied, so the log never
// claims a change that did not happen.
func reload(path string, running *conf.Config, level *slog.LevelVar, log *slog.Logger) {
	if path == "" {
		log.Warn("reload: no config file to re-read; running on built-in defaults")
		return
	}
	next, err := conf.Load(path)
	if err != nil {
		logProblems(log, "reload: config invalid; nothing changed", err)
		return
	}
	changed, err := running.Reloadable(next)
	if err != nil {
		logProblems(log, "reload: refused; nothing changed", err)
		return
	}
	l, err := logging.ParseLevel(next.Log.Level)
	if err != nil { // conf.Load validated the level; keep the current one if not
		log.Error("reload: log level", "err", err)
		return
	}
	level.Set(l)
	log.Info("reload: applied", "log.level", next.Log.Level)
	changed = slices.DeleteFunc(changed, func(f string) bool { return f == "log.level" })
	if len(changed) > 0 {
		log.Warn("reload: not applied by this version; restart to apply", "fields", changed)
	}
}

// logProblems logs each problem of a conf error on its own record.
func logProblems(log *slog.Logger, msg string, err error) {
	var errs *conf.Errors
	if !errors.As(err, &errs) {
		log.Error(msg, "err", err)
		return
	}
	for _, e := range errs.List {
		log.Error(msg, "problem", e.Error())
	}
}
