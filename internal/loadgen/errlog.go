package loadgen

import (
	"fmt"
	"sync"
)

// errorLog collects a run's errors by kind: it counts them all and keeps the first few of
// each kind, so that 19,000 refused connections make one line, not 19,000. It is safe
// for concurrent use.
type errorLog struct {
	mu    sync.Mutex
	kinds []string // in order of first appearance
	count map[string]int
	first map[string][]string
}

const errorsKept = 3 // per kind

func (l *errorLog) add(kind string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == nil {
		l.count, l.first = make(map[string]int), make(map[string][]string)
	}
	if l.count[kind] == 0 {
		l.kinds = append(l.kinds, kind)
	}
	l.count[kind]++
	if len(l.first[kind]) < errorsKept {
		l.first[kind] = append(l.first[kind], err.Error())
	}
}

// lines returns one line per kind: "kind: N errors, e.g. first; second".
func (l *errorLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, k := range l.kinds {
		line := fmt.Sprintf("%s: %d error(s), e.g. %s", k, l.count[k], l.first[k][0])
		for _, e := range l.first[k][1:] {
			line += "; " + e
		}
		out = append(out, line)
	}
	return out
}
