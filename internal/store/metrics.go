package store

import (
	"github.com/prometheus/client_golang/prometheus"
)

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

func newCommitHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "bifrost_store_commit_duration_seconds",
		Help:    "Time to write one group of batches to the store, the fsync included when the sync policy asks for one.",
		Buckets: commitBuckets,
	})
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
	commits, failures, groups, written      *prometheus.Desc
	diskWritten, disk, memtable, blockCache *prometheus.Desc
}

// Collector returns a prometheus.Collector of st's metrics (see above), for the caller
// to register, or nil if st was made neither by Open nor by NewMemory.
func Collector(st Store) prometheus.Collector {
	s, ok := st.(*store)
	if !ok {
		return nil
	}
	desc := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &metricsCollector{
		s:        s,
		commits:  desc("bifrost_store_commits_total", "Batches the store's committer wrote or tried to write."),
		failures: desc("bifrost_store_commit_failures_total", "Batches whose commit failed (disk full, I/O error): their acknowledgements were refused."),
		groups:   desc("bifrost_store_commit_groups_total", "Groups of batches written: one WAL write each, and one fsync each under sync: always."),
		written:  desc("bifrost_store_written_bytes_total", "Bytes of the batches committed to the store."),
		diskWritten: desc("bifrost_store_disk_written_bytes_total",
			"Bytes the store's engine wrote to disk: write-ahead log, memtable flushes and compactions."),
		disk:       desc("bifrost_store_disk_bytes", "Disk space the store's files take, live and obsolete."),
		memtable:   desc("bifrost_store_memtable_bytes", "Memory of the store's memtables (C memory in a cgo build, Go heap otherwise)."),
		blockCache: desc("bifrost_store_block_cache_bytes", "Memory of the store's block cache (C memory in a cgo build, Go heap otherwise)."),
	}
}

// Describe implements prometheus.Collector.
func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.commits, c.failures, c.groups, c.written, c.diskWritten, c.disk,
		c.memtable, c.blockCache} {
		ch <- d
	}
	c.s.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(c.commits, s.commits.Load())
	counter(c.failures, s.failed.Load())
	counter(c.groups, s.groups.Load())
	counter(c.written, s.written.Load())
	s.duration.Collect(ch)
	if st, ok := s.eng.stats(); ok {
		counter(c.diskWritten, st.diskWrittenBytes)
		gauge(c.disk, float64(st.diskBytes))
		gauge(c.memtable, float64(st.memtableBytes))
		gauge(c.blockCache, float64(st.cacheBytes))
	}
}
