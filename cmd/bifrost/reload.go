package main

import (
	"errors"
	"log/slog"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
)

// reload answers SIGHUP: the config file is read again and its live changes applied
// (bifrost.Broker.Reload, which logs each change as field: old → new, and each change
// that needs a restart), the admin API's token file, then the password, ACL and
// certificate files. A file with an error changes nothing; each problem is logged on its
// own record, file:line: field: message, as check-config prints it.
func reload(b *bifrost.Broker, path string, log *slog.Logger) {
	if path == "" {
		log.Info("reload: no config file to re-read (built-in defaults); re-reading the admin token, auth and TLS files")
	}
	if _, err := b.Reload(); err != nil {
		logProblems(log, "reload: nothing changed", err)
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
