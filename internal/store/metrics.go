package store

import "github.com/bifrost-mqtt/bifrost/internal/metrics"

// Metrics
//
// The committer counts what it does in atomics (commit.go) and times each group in a
// histogram; nothing else is added to the commit path. Pebble's own figures (disk
// space, memtables, block cache, bytes it wrote) are read at scrape time from
// pebble.DB.Metrics, which takes Pebble's locks briefly and allocates a few KiB: cheap at
// a scrape every few seconds, too dear per commit.
//
//	bifrost_store_commits_total                batches the committer wrote or tried
//	bifrost_store_commit_failures_total        of those, batches whose commit failed
//	bifrost_store_commit_groups_total          groups: one WAL write each, and under
//	                                           sync: always one fsync each
//	bifrost_store_commit_duration_seconds      histogram: time to write one group, fsync
//	                                           included
//	bifrost_store_written_bytes_total          bytes of the batches committed (what the
//	                                           broker asked to store)
//	bifrost_store_disk_written_bytes_total     bytes Pebble wrote: WAL, flushes and
//	                                           compactions (over written_bytes: the write
//	                                           amplification flash pays for)
//	bifrost_store_disk_bytes                   disk space the store's files take
//	bifrost_store_memtable_bytes               memory of the memtables (the one filling
//	                                           and any waiting to be flushed)
//	bifrost_store_block_cache_bytes            memory of the block cache
//
// Pebble takes both from C's malloc in a cgo build and from the Go heap otherwise
// (store.go, Memory).
//
// The last four are absent for the memory store and while the database is closed after
// a failed write; disk_written_bytes starts again from 0 when it is reopened (Prometheus
// sees a counter reset). The broker adds bifrost_store_messages (the messages its Journal
// counts as stored).

// commitBuckets are the commit durations told apart, in seconds: from an fsync on an
// NVMe drive (tens of µs) to an SD card having a bad moment (seconds).
var commitBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
	50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5}

func newCommitHistogram() *metrics.Histogram {
	return metrics.NewHistogram("bifrost_store_commit_duration_seconds",
		"Time to write one group of batches to the store, the fsync included when the sync policy asks for one.",
		commitBuckets)
}

// engineStats are an engine's figures for metrics.
type engineStats struct {
	diskBytes        uint64 // files on disk, live and obsolete
	diskWrittenBytes uint64 // WAL, flushes, compactions
	memtableBytes    uint64
	cacheBytes       int64
}

func (e *memEngine) stats() (engineStats, bool) { return engineStats{}, false }

// metricsCollector exports a store's metrics.
type metricsCollector struct {
	s                                       *store
	commits, failures, groups, written      *metrics.Desc
	diskWritten, disk, memtable, blockCache *metrics.Desc
}

// Collector returns a metrics.Collector of st's metrics (see above), for the caller
// to register, or nil if st was made neither by Open nor by NewMemory.
func Collector(st Store) metrics.Collector {
	s, ok := st.(*store)
	if !ok {
		return nil
	}
	counter := func(name, help string) *metrics.Desc { return metrics.NewDesc(metrics.KindCounter, name, help) }
	gauge := func(name, help string) *metrics.Desc { return metrics.NewDesc(metrics.KindGauge, name, help) }
	return &metricsCollector{
		s:        s,
		commits:  counter("bifrost_store_commits_total", "Batches the store's committer wrote or tried to write."),
		failures: counter("bifrost_store_commit_failures_total", "Batches whose commit failed (disk full, I/O error): their acknowledgements were refused."),
		groups:   counter("bifrost_store_commit_groups_total", "Groups of batches written: one WAL write each, and one fsync each under sync: always."),
		written:  counter("bifrost_store_written_bytes_total", "Bytes of the batches committed to the store."),
		diskWritten: counter("bifrost_store_disk_written_bytes_total",
			"Bytes the store's engine wrote to disk: write-ahead log, memtable flushes and compactions."),
		disk:       gauge("bifrost_store_disk_bytes", "Disk space the store's files take, live and obsolete."),
		memtable:   gauge("bifrost_store_memtable_bytes", "Memory of the store's memtables (C memory in a cgo build, Go heap otherwise)."),
		blockCache: gauge("bifrost_store_block_cache_bytes", "Memory of the store's block cache (C memory in a cgo build, Go heap otherwise)."),
	}
}

// Describe implements metrics.Collector.
func (c *metricsCollector) Describe() []*metrics.Desc {
	return append([]*metrics.Desc{c.commits, c.failures, c.groups, c.written, c.diskWritten, c.disk,
		c.memtable, c.blockCache}, c.s.duration.Describe()...)
}

// Collect implements metrics.Collector.
func (c *metricsCollector) Collect(w metrics.Writer) {
	s := c.s
	w.Value(c.commits, float64(s.commits.Load()))
	w.Value(c.failures, float64(s.failed.Load()))
	w.Value(c.groups, float64(s.groups.Load()))
	w.Value(c.written, float64(s.written.Load()))
	s.duration.Collect(w)
	if st, ok := s.eng.stats(); ok {
		w.Value(c.diskWritten, float64(st.diskWrittenBytes))
		w.Value(c.disk, float64(st.diskBytes))
		w.Value(c.memtable, float64(st.memtableBytes))
		w.Value(c.blockCache, float64(st.cacheBytes))
	}
}
