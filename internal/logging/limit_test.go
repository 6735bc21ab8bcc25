package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// lockedBuffer is a log's output, written from the limiter's timers too.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}

// TestLimiter: a flood of one key is a line per interval, the suppressed ones counted;
// another key is logged at once; a key quiet for an interval is logged at once again.
func TestLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
		l := NewLimiter(1, time.Second)
		for i := range 100 { // a line every 30 ms for 3 s
			l.Log(log, slog.LevelError, "flood", "flood", "i", i)
			if i == 10 {
				l.Log(log, slog.LevelWarn, "other", "other")
			}
			time.Sleep(30 * time.Millisecond)
		}
		time.Sleep(3 * time.Second) // the windows end
		l.Log(log, slog.LevelError, "flood", "flood", "i", "again")
		want := []string{
			`level=ERROR msg=flood i=0`,
			`level=WARN msg=other`,
			`level=ERROR msg=flood i=33 suppressed=33`,
			`level=ERROR msg=flood i=66 suppressed=33`,
			`level=ERROR msg=flood i=99 suppressed=33`,
			`level=ERROR msg=flood i=again`,
		}
		got := out.lines()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestLimiterBurst: burst lines of a key pass in a window, the rest are counted and the
// last of them reported when it ends.
func TestLimiterBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
		l := NewLimiter(3, time.Second)
		for i := range 10 {
			l.Log(log, slog.LevelInfo, "k", "refused", "i", i)
		}
		time.Sleep(1500 * time.Millisecond)
		l.Log(log, slog.LevelInfo, "k", "refused", "i", 10)
		time.Sleep(3 * time.Second)
		want := []string{
			`level=INFO msg=refused i=0`,
			`level=INFO msg=refused i=1`,
			`level=INFO msg=refused i=2`,
			`level=INFO msg=refused i=9 suppressed=7`,
			`level=INFO msg=refused i=10`,
		}
		got := out.lines()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}

// TestLimiterSkip: a hot path asks Skip first: it lets the first line of a window through
// to Log, then counts the others without their arguments (allocating nothing; SkipN
// counts a line's n events), and the window ends with the line logged, repeated with the
// count.
func TestLimiterSkip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
		l := NewLimiter(1, time.Second)
		event := func(i int) {
			if !l.Skip("k") {
				l.Log(log, slog.LevelWarn, "k", "dropped", "i", i)
			}
		}
		for i := range 5 {
			event(i)
		}
		if n := testing.AllocsPerRun(100, func() { l.Skip("k") }); n != 0 {
			t.Errorf("Skip allocates %.1f times", n)
		}
		time.Sleep(1500 * time.Millisecond) // the window ends: 4 + 101 counted
		event(5)                            // in the window the end opened: counted
		if !l.SkipN("k", 3) {               // a line for three events: counted as three
			t.Error("SkipN in an open window did not skip")
		}
		time.Sleep(3 * time.Second)
		want := []string{
			`level=WARN msg=dropped i=0`,
			`level=WARN msg=dropped i=0 suppressed=105`,
			`level=WARN msg=dropped i=0 suppressed=4`,
		}
		got := out.lines()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}
