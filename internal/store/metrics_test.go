package store

import (
	"strings"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
)

// gather collects c's series by name; a histogram's value is its sample count.
func gather(t testing.TB, c metrics.Collector) map[string]float64 {
	t.Helper()
	sums, err := metrics.Gather(c) // also checks Describe against Collect
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, m := range sums {
		if h, ok := strings.CutSuffix(name, "_count"); ok && sums[h+"_sum"] != nil {
			out[h] = m[""]
			continue
		}
		if _, ok := strings.CutSuffix(name, "_sum"); ok && sums[strings.TrimSuffix(name, "_sum")+"_count"] != nil {
			continue
		}
		out[name] = m[""]
	}
	return out
}

// TestMetrics: the store's series exist and follow its commits, failed ones included;
// Pebble's figures (disk, memtable, cache) come with the store on disk only.
func TestMetrics(t *testing.T) { forEngines(t, testMetrics) }

func testMetrics(t *testing.T, engine string) {
	dir := t.TempDir()
	h := new(hooks)
	s := openTest(t, engine, dir, conf.SyncAlways, h)
	setBackoff(s, time.Millisecond)
	c := Collector(s)
	before := gather(t, c)
	for _, name := range []string{"bifrost_store_commits_total", "bifrost_store_commit_failures_total",
		"bifrost_store_commit_groups_total", "bifrost_store_written_bytes_total",
		"bifrost_store_commit_duration_seconds", "bifrost_store_disk_written_bytes_total",
		"bifrost_store_disk_bytes", "bifrost_store_memtable_bytes", "bifrost_store_block_cache_bytes"} {
		if _, ok := before[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	var size int
	for i := range 10 {
		var b Batch
		b.PutMessage(uint64(i+1), MessageRecord{Topic: []byte("t"), Payload: []byte(strings.Repeat("x", 100))})
		size += b.Size()
		commit(t, s, &b)
	}
	after := gather(t, c)
	if d := after["bifrost_store_commits_total"] - before["bifrost_store_commits_total"]; d != 10 {
		t.Errorf("commits moved by %v, want 10", d)
	}
	if d := after["bifrost_store_written_bytes_total"] - before["bifrost_store_written_bytes_total"]; d != float64(size) {
		t.Errorf("written bytes moved by %v, want %d", d, size)
	}
	if after["bifrost_store_commit_duration_seconds"] != after["bifrost_store_commit_groups_total"] ||
		after["bifrost_store_commit_groups_total"] < 10 {
		t.Errorf("groups %v, timed %v; want ≥ 10 and equal", after["bifrost_store_commit_groups_total"],
			after["bifrost_store_commit_duration_seconds"])
	}
	if after["bifrost_store_disk_written_bytes_total"] <= before["bifrost_store_disk_written_bytes_total"] ||
		after["bifrost_store_disk_bytes"] == 0 || engine == conf.EnginePebble && after["bifrost_store_memtable_bytes"] == 0 {
		t.Errorf("engine figures did not move: before %v, after %v", before, after)
	}

	h.full.Store(true)
	ch := make(chan error, 1)
	s.Commit(new(Batch), func(err error) { ch <- err })
	var b Batch
	b.PutInbound("c", 1)
	s.Commit(&b, func(err error) { ch <- err })
	<-ch
	if err := <-ch; err == nil {
		t.Fatal("commit succeeded on a full disk")
	}
	h.full.Store(false)
	if got := gather(t, c)["bifrost_store_commit_failures_total"]; got < 1 {
		t.Errorf("failures %v, want ≥ 1", got)
	}
}

// TestMetricsMemory: the memory store has the committer's series and no engine ones.
func TestMetricsMemory(t *testing.T) {
	st := NewMemory()
	defer st.Close()
	var b Batch
	b.PutInbound("c", 1)
	commit(t, st, &b)
	got := gather(t, Collector(st))
	if got["bifrost_store_commits_total"] != 1 {
		t.Errorf("commits %v, want 1", got["bifrost_store_commits_total"])
	}
	if _, ok := got["bifrost_store_disk_bytes"]; ok {
		t.Error("the memory store reports disk bytes")
	}
	if Collector(struct{ Store }{st}) != nil {
		t.Error("a Collector for a foreign Store")
	}
}
