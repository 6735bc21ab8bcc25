package store

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestDiskFull fails commits while the disk is full, with an error the broker can map to
// a reason code, and works again once space returns, without a restart.
func TestDiskFull(t *testing.T) { forEngines(t, testDiskFull) }

func testDiskFull(t *testing.T, engine string) {
	for _, sync := range []string{conf.SyncAlways, conf.SyncInterval, conf.SyncNone} {
		t.Run("Sync="+sync, func(t *testing.T) {
			dir := t.TempDir()
			h := new(hooks)
			s := openTest(t, engine, dir, sync, h)
			setBackoff(s, time.Millisecond)
			put := func(pid uint16) error {
				var b Batch
				b.PutSession(SessionRecord{ClientID: "c", Version: 5})
				b.PutInbound("c", pid)
				ch := make(chan error, 1)
				s.Commit(&b, func(err error) { ch <- err })
				return <-ch
			}
			if err := put(1); err != nil {
				t.Fatal(err)
			}
			if sync == conf.SyncInterval { // let the timer sync it
				testenv.WaitFor(t, "the syncer to flush", func() bool { return s.flushes.Load() > 0 })
			}

			h.full.Store(true)
			// Under always the first commit fails; under interval and none the write
			// fails in Pebble's background, and a later commit (or the syncer) sees it.
			var err error
			testenv.WaitFor(t, "a commit to fail on the full disk", func() bool { err = put(2); return err != nil })
			t.Logf("disk full: %v", err)
			if !errors.Is(err, ErrWrite) || !errors.Is(err, ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("error %v: want ErrWrite, ErrNoSpace and ENOSPC", err)
			}
			if err := put(3); err == nil {
				t.Error("commit succeeded on a full disk")
			}

			h.full.Store(false)
			testenv.WaitFor(t, "a commit to succeed once the disk has room", func() bool { return put(4) == nil })
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			got := load(t, openTest(t, engine, dir, sync, nil))
			// Under none, c/1 may have been lost with the WAL block it sat in.
			if !got.inbound["c/1"] && sync != conf.SyncNone || !got.inbound["c/4"] {
				t.Errorf("inbound after reopen: %v; want c/1 and c/4", got.inbound)
			}
			if sync == conf.SyncAlways && got.inbound["c/3"] {
				t.Errorf("inbound c/3 present, but its write failed")
			}
		})
	}
}
