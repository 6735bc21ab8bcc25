package memory

import "sync"

// The server profile's GC percent (serverGCPercent) scales the heap's headroom with the
// live heap: a broker with a small live heap (a few thousand clients, a few MiB) gets a few
// MiB of headroom, and at a few hundred thousand messages a second, each leaving a message
// of garbage behind, it would collect several times a second. The headroom tuner keeps the
// goal at least the headroom (headroomFor) above the live heap instead: after every GC cycle it sets
//
//	GOGC = max(serverGCPercent, 100 × headroom / live)
//
// so that a small heap collects about as rarely as a big one (a cycle per headroom of
// allocation), and a big heap keeps serverGCPercent. This is the heap ballast of the
// design's background reading without the ballast: the goal is raised, no memory is
// touched, and the memory limit still caps the heap whatever GOGC says. The memory the
// headroom lets a busy broker take is given back when it goes quiet (releaseRule's quiet
// test).
const (
	// minHeadroomMax is the headroom the tuner keeps on a server with a large limit:
	// at 50 MB/s of garbage (300K QoS 1 messages a second) about one cycle a second.
	minHeadroomMax = 64 << 20
	// minHeadroomShare caps it at an eighth of the memory limit on small servers.
	minHeadroomShare = 8
	// maxTunedGCPercent bounds GOGC for a near-empty heap (64 MiB over 1 MiB live is 6400).
	maxTunedGCPercent = 10000
	// retuneSlack: a change under 1/8 of the percent in force is not worth setting.
	retuneSlack = 8
)

// headroomFor returns the least headroom the tuner keeps under memory limit limit.
func headroomFor(limit int64) uint64 {
	return min(minHeadroomMax, uint64(max(limit, 0))/minHeadroomShare)
}

// tunedGCPercent returns the GC percent that keeps the goal at least headroom above live,
// and never under base.
func tunedGCPercent(base int, live, headroom uint64) int {
	if live == 0 {
		return base
	}
	p := (headroom*100 + live - 1) / live
	return int(min(max(p, uint64(base)), maxTunedGCPercent))
}

// A tuner re-sets GOGC at the end of every GC cycle, from the pressure sampler's GC hook
// (pressure.go): no goroutine, no polling.
type tuner struct {
	mu       sync.Mutex // guards the fields below and the runtime's GC percent
	base     int
	headroom uint64
	cur      int // the GC percent last set
	stopped  bool
	read     func() runtimeSample
	set      func(int) int
}

// adjust sets GOGC for the live heap of the last cycle, unless the tuner was stopped.
func (t *tuner) adjust() {
	live := t.read().Live
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	p := tunedGCPercent(t.base, live, t.headroom)
	if d := p - t.cur; d*retuneSlack > t.cur || -d*retuneSlack > t.cur {
		t.set(p)
		t.cur = p
	}
}

// reset changes the base percent and headroom (a reload changed the limit) and tunes again.
func (t *tuner) reset(base int, headroom uint64) {
	t.mu.Lock()
	t.base, t.headroom = base, headroom
	t.mu.Unlock()
	t.adjust()
}

// stop ends the tuning; GOGC is left for the caller to restore.
func (t *tuner) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

// percent returns the GC percent the tuner last set.
func (t *tuner) percent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cur
}
