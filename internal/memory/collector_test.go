package memory

import (
	"testing"
	"testing/fstest"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

func TestCollector(t *testing.T) {
	keepGCSettings(t)
	sys := fixtureSystem(fstest.MapFS{})
	sys.read = func() runtimeSample { return runtimeSample{Live: 95 * mib} }
	p, err := apply(conf.Memory{Profile: conf.ProfileEdge, Limit: 100 * mib}, discard(), sys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	p.returned.Store(3)
	p.retBytes.Store(30 * mib)

	// The broker's registry takes it: no series clashes with the broker's own.
	if err := metrics.New(nil).Register(p.Collector()); err != nil {
		t.Fatal(err)
	}

	sums, err := metrics.Gather(p.Collector())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for name, m := range sums {
		got[name] = m[""]
	}
	// Hard since Apply: some time, however little, is counted.
	if got["bifrost_memory_hard_seconds_total"] <= 0 {
		t.Errorf("bifrost_memory_hard_seconds_total = %v at hard, want > 0", got["bifrost_memory_hard_seconds_total"])
	}
	delete(got, "bifrost_memory_hard_seconds_total")
	want := map[string]float64{
		"bifrost_memory_pressure":             float64(Hard),
		"bifrost_memory_used_bytes":           95 * mib,
		"bifrost_memory_returned_total":       3,
		"bifrost_memory_returned_bytes_total": 30 * mib,
	}
	if len(got) != len(want) {
		t.Errorf("gathered %v, want %v", got, want)
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
}
