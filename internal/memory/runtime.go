package memory

import (
	"bytes"
	"io/fs"
	"math"
	"os"
	"runtime/metrics"
	"strconv"
)

// runtimeSample holds the runtime's memory figures the policy decides on, read together
// so that they are consistent with each other.
type runtimeSample struct {
	Live     uint64 // heap marked live by the last GC
	Goal     uint64 // heap size the GC aims to finish its next cycle at
	Total    uint64 // all memory the runtime has mapped
	Objects  uint64 // heap in objects, live or not yet swept
	Unused   uint64 // heap in spans in use but not holding objects
	Free     uint64 // heap in free spans, not returned to the OS
	Released uint64 // heap returned to the OS
	Allocs   uint64 // heap allocated since the process started, cumulative
	Cycles   uint64 // GC cycles completed since the process started
}

// runtimeMetrics are the runtime/metrics names read into a runtimeSample, in field order.
var runtimeMetrics = [...]string{
	"/gc/heap/live:bytes",
	"/gc/heap/goal:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/cycles/total:gc-cycles",
}

// readRuntime reads the runtime's memory figures. A figure the runtime does not support
// reads 0.
func readRuntime() runtimeSample {
	var s [len(runtimeMetrics)]metrics.Sample
	for i, name := range runtimeMetrics {
		s[i].Name = name
	}
	metrics.Read(s[:])
	var v [len(runtimeMetrics)]uint64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return runtimeSample{
		Live: v[0], Goal: v[1], Total: v[2],
		Objects: v[3], Unused: v[4], Free: v[5], Released: v[6], Allocs: v[7], Cycles: v[8],
	}
}

// Used is the memory the GC cannot reclaim: the live heap plus everything the runtime maps
// outside the heap's object space (goroutine stacks, runtime metadata, profiling buckets).
// Garbage, free spans and released pages are left out: the next cycle, or the scavenger,
// turns them into room.
func (s runtimeSample) Used() uint64 {
	heap := s.Objects + s.Unused + s.Free + s.Released
	if s.Total < heap {
		return s.Live
	}
	return s.Live + s.Total - heap
}

// Retained is the heap memory the runtime holds from the OS: objects, unused space in
// their spans, and free spans not yet released.
func (s runtimeSample) Retained() uint64 { return s.Objects + s.Unused + s.Free }

// Mapped is what the runtime holds from the OS, the figure its memory limit counts; it
// stands in for RSS where /proc is not available.
func (s runtimeSample) Mapped() uint64 {
	if s.Total < s.Released {
		return 0
	}
	return s.Total - s.Released
}

const statmPath = "proc/self/statm"

// readRSS returns the process's resident set size from /proc/self/statm (its second
// field, in pages), and false where that cannot be read.
func readRSS(fsys fs.FS) (uint64, bool) {
	data, err := fs.ReadFile(fsys, statmPath)
	if err != nil {
		return 0, false
	}
	// "size resident shared text lib data dt", in pages.
	f := bytes.Fields(data)
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}

// readGCPercent returns the GC percent in force (GOGC), -1 for off.
func readGCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt32 {
		return -1 // off: the runtime stores -1 and reports it unsigned
	}
	return int(v)
}
