package store

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// fullWAL returns a file system on which, while the toggle is on, writing or syncing a
// WAL file fails with ENOSPC: the first thing a full disk breaks. (Failing the MANIFEST
// too would stop the process, as Pebble intends; see the package doc.)
func fullWAL() (*errorfs.Toggle, vfs.FS) {
	tog := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo,
			errorfs.OpCreate, errorfs.OpReuseForWrite:
			return syscall.ENOSPC
		}
		return nil
	})}
	return tog, errorfs.Wrap(vfs.Default, tog)
}

// TestDiskFull fails commits while the disk is full, with an error the broker can map to
// a reason code, and works again once space returns, without a restart.
func TestDiskFull(t *testing.T) {
	for _, sync := range []string{conf.SyncAlways, conf.SyncInterval, conf.SyncNone} {
		t.Run("Sync="+sync, func(t *testing.T) {
			dir := t.TempDir()
			tog, fs := fullWAL()
			s := openTest(t, dir, sync, fs)
			s.eng.(*pebbleEngine).backoff = time.Millisecond
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

			tog.On()
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

			tog.Off()
			testenv.WaitFor(t, "a commit to succeed once the disk has room", func() bool { return put(4) == nil })
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			got := load(t, openTest(t, dir, sync, nil))
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
