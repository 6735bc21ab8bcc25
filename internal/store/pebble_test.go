//go:build !bifrost_nopebble

package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/pebbledb"
)

// TestOpenErrorsPebble: what only the pebble engine meets at open.
func TestOpenErrorsPebble(t *testing.T) {
	t.Run("ForeignPebble", func(t *testing.T) {
		dir := t.TempDir()
		db, err := pebble.Open(dir, &pebble.Options{Logger: pebbledb.Logger{Log: testLogger(t)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Set([]byte("their key"), []byte("their value"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		db.Close()
		_, err = Open(testConfig(dir, ""), testLogger(t))
		if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open = %v, want ErrForeign naming %s", err, dir)
		}
		t.Log(err)
	})
	t.Run("CorruptManifest", func(t *testing.T) {
		dir := t.TempDir()
		openTest(t, conf.EnginePebble, dir, "", nil).Close()
		names, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
		for _, n := range names {
			if err := os.WriteFile(n, []byte("garbage"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Open(testConfig(dir, ""), testLogger(t))
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Fatalf("Open = %v, want an error naming %s", err, dir)
		}
		t.Log(err)
	})
	t.Run("InterruptedCreation", func(t *testing.T) {
		dir := t.TempDir()
		for _, name := range []string{"LOCK", "000002.log", "OPTIONS-000003"} {
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		openTest(t, conf.EnginePebble, dir, "", nil)
	})
}

// TestOtherEngine: a directory that one engine wrote is refused by the other, with an
// error naming the engine that wrote it and the setting that opens it, and left as it
// was.
func TestOtherEngine(t *testing.T) {
	for _, c := range []struct{ wrote, opens string }{
		{conf.EnginePebble, conf.EngineLog},
		{conf.EngineLog, conf.EnginePebble},
	} {
		t.Run("Wrote="+c.wrote, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, c.wrote, dir, conf.SyncAlways, nil)
			var b Batch
			b.PutSession(SessionRecord{ClientID: "c", Version: 5})
			commit(t, s, &b)
			s.Close()
			before, _ := os.ReadDir(dir)

			cfg := testConfig(dir, conf.SyncAlways)
			cfg.Engine = c.opens
			_, err := Open(cfg, testLogger(t))
			want := []string{dir, "written by the " + c.wrote + " engine", "store.engine: " + c.wrote}
			if !errors.Is(err, ErrOtherEngine) {
				t.Fatalf("Open = %v, want ErrOtherEngine", err)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			t.Log(err)
			if after, _ := os.ReadDir(dir); len(after) != len(before) {
				t.Errorf("%d files before the refused open, %d after", len(before), len(after))
			}
			if got := load(t, openTest(t, c.wrote, dir, conf.SyncAlways, nil)); len(got.sessions) != 1 {
				t.Errorf("the store's own engine finds %d sessions, want 1", len(got.sessions))
			}
		})
	}
}
