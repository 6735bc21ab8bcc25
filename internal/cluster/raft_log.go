package cluster

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// The engines log through the broker's slog logger: memberlist writes lines to a
// *log.Logger, raft to an hclog.Logger. Each record keeps the engine's level, except
// where noted, and names the engine (component=memberlist, raft).

// levelTrace is below slog's Debug: raft's trace records, off unless asked for.
const levelTrace = slog.LevelDebug - 4

// memberlistLogger returns a *log.Logger for memberlist.Config.Logger: each line's
// "[LEVEL] memberlist: " prefix becomes the record's level. note, if not nil, is given
// every line without its prefixes (membership reads suspicions and refusals in them); a
// line it calls quiet is logged at debug level.
func memberlistLogger(l *slog.Logger, note func(line string) (quiet bool)) *log.Logger {
	return log.New(&lineWriter{log: l.With("component", "memberlist"), note: note}, "", 0)
}

type lineWriter struct {
	log  *slog.Logger
	note func(line string) (quiet bool)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, lv := range []struct {
		prefix string
		level  slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError}} {
		if rest, ok := bytes.CutPrefix(line, []byte(lv.prefix)); ok {
			level, line = lv.level, bytes.TrimSpace(rest)
			break
		}
	}
	text := string(bytes.TrimPrefix(line, []byte("memberlist: ")))
	if w.note != nil && w.note(text) {
		level = slog.LevelDebug
	}
	w.log.Log(context.Background(), level, text)
	return len(p), nil
}

// hclogger is an hclog.Logger on slog, for raft.
type hclogger struct {
	log  *slog.Logger
	name string
	args []any
}

func newHCLogger(l *slog.Logger, name string) hclog.Logger {
	return &hclogger{log: l.With("component", name), name: name}
}

var _ hclog.Logger = (*hclogger)(nil)

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (h *hclogger) Log(level hclog.Level, msg string, args ...any) {
	h.log.Log(context.Background(), slogLevel(level), msg, args...)
}
func (h *hclogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogger) enabled(level hclog.Level) bool {
	return h.log.Enabled(context.Background(), slogLevel(level))
}
func (h *hclogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogger) ImpliedArgs() []any { return h.args }

func (h *hclogger) With(args ...any) hclog.Logger {
	return &hclogger{log: h.log.With(args...), name: h.name, args: append(h.args[:len(h.args):len(h.args)], args...)}
}

func (h *hclogger) Name() string { return h.name }

func (h *hclogger) Named(name string) hclog.Logger {
	return &hclogger{log: h.log.With("name", name), name: h.name + "." + name, args: h.args}
}

func (h *hclogger) ResetNamed(name string) hclog.Logger {
	return &hclogger{log: h.log.With("name", name), name: name, args: h.args}
}

// SetLevel does nothing: the broker's logger decides (log.level, reloadable).
func (h *hclogger) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level the broker's logger lets through.
func (h *hclogger) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Error
}

func (h *hclogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(nil), "", 0)
}

func (h *hclogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &lineWriter{log: h.log}
}
