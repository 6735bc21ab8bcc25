package raftstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// openTest opens a store in dir, closed when the test ends.
func openTest(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// entry returns the log at index in term, with contents that depend on both, so that a
// read can be checked against them: every third entry has extensions, every fifth no
// data, every seventh no AppendedAt.
func entry(index, term uint64) *raft.Log {
	l := &raft.Log{Index: index, Term: term, Type: raft.LogType(index % 6)}
	if index%5 != 0 {
		l.Data = fmt.Appendf(nil, "data %d/%d %s", index, term, bytes.Repeat([]byte{byte(index)}, int(index%97)))
	}
	if index%3 == 0 {
		l.Extensions = fmt.Appendf(nil, "ext %d", term)
	}
	if index%7 != 0 {
		l.AppendedAt = time.Unix(1_800_000_000, int64(index*1000+term))
	}
	return l
}

// entries returns the logs from lo to hi in term.
func entries(lo, hi, term uint64) []*raft.Log {
	var logs []*raft.Log
	for i := lo; i <= hi; i++ {
		logs = append(logs, entry(i, term))
	}
	return logs
}

// sameLog reports how got differs from want, or "".
func sameLog(got, want *raft.Log) string {
	switch {
	case got.Index != want.Index, got.Term != want.Term, got.Type != want.Type:
		return fmt.Sprintf("index/term/type %d/%d/%v, want %d/%d/%v", got.Index, got.Term, got.Type, want.Index, want.Term, want.Type)
	case !bytes.Equal(got.Data, want.Data), (got.Data == nil) != (want.Data == nil):
		return fmt.Sprintf("data %q, want %q", got.Data, want.Data)
	case !bytes.Equal(got.Extensions, want.Extensions), (got.Extensions == nil) != (want.Extensions == nil):
		return fmt.Sprintf("extensions %q, want %q", got.Extensions, want.Extensions)
	case !got.AppendedAt.Equal(want.AppendedAt):
		return fmt.Sprintf("appendedAt %v, want %v", got.AppendedAt, want.AppendedAt)
	}
	return ""
}
