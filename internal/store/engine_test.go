package store

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// TestEngineDefaulted: with store.engine not set, a directory another engine wrote is
// opened with that engine (an upgrade that changed the profile's default) and its records
// are kept; set explicitly, the other engine's directory is still refused.
func TestEngineDefaulted(t *testing.T) {
	if !pebbleBuilt {
		t.Skip("this build has one engine on disk (-tags bifrost_nopebble)")
	}
	for _, tc := range []struct{ wrote, then string }{{conf.EngineLog, conf.EnginePebble}, {conf.EnginePebble, conf.EngineLog}} {
		t.Run(tc.wrote, func(t *testing.T) {
			dir := t.TempDir()
			st, err := Open(testConfigEngine(tc.wrote, dir, conf.SyncAlways), testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			var b Batch
			b.PutSession(SessionRecord{ClientID: "kept", Version: 5, Expiry: 60})
			commit(t, st, &b)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			cfg := testConfigEngine(tc.then, dir, conf.SyncAlways)
			if _, err := Open(cfg, testLogger(t)); err == nil {
				t.Fatalf("store.engine: %s opened a %s store", tc.then, tc.wrote)
			}
			cfg.EngineDefaulted = true
			st, err = Open(cfg, testLogger(t))
			if err != nil {
				t.Fatalf("store.engine unset: %v", err)
			}
			defer st.Close()
			if c := load(t, st); len(c.sessions) != 1 || c.sessions["kept"].ClientID != "kept" {
				t.Fatalf("sessions %v; want kept", c.sessions)
			}
		})
	}
}
