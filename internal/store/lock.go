package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Only one Store may use a directory at a time. Pebble enforces it with a POSIX record
// lock on the directory's LOCK file, which fails with "resource temporarily unavailable"
// when another process holds it, and which does not stop the process that holds it:
// Pebble tells its own opens apart by the path as written, so a second Open of the same
// directory through a symbolic link succeeds and two databases write the same files. This
// file closes that gap for the directories of this process (claimDir, by file identity)
// and names the holder when it is another process (inUse).

// claimed are the directories held by this process's open stores.
var claimed struct {
	mu   sync.Mutex
	dirs []os.FileInfo
}

// claimDir marks dir as held by this process until release is called, or fails with
// ErrInUse if an open store of this process holds it, under whatever path.
func claimDir(dir string) (release func(), err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	claimed.mu.Lock()
	defer claimed.mu.Unlock()
	for _, held := range claimed.dirs {
		if os.SameFile(held, fi) {
			return nil, fmt.Errorf("%w: %s is already open in this process; close that store (or broker) first, or set store.dir to another directory",
				ErrInUse, dir)
		}
	}
	claimed.dirs = append(claimed.dirs, fi)
	return func() {
		claimed.mu.Lock()
		defer claimed.mu.Unlock()
		for i, held := range claimed.dirs {
			if held == fi {
				claimed.dirs = append(claimed.dirs[:i], claimed.dirs[i+1:]...)
				return
			}
		}
	}, nil
}

// inUse returns the error for a failed Open of dir, which this process does not hold,
// when another process holds the directory's lock: which one, as far as it can be known,
// and what to do. It returns nil when no other process holds the lock (the failure has
// another cause).
func inUse(dir string) error {
	pid, held := lockHolder(filepath.Join(dir, "LOCK"))
	if !held {
		return nil
	}
	who := "a process this one cannot see (another PID namespace, such as another container)"
	if pid > 0 {
		who = "pid " + strconv.Itoa(pid)
		if name := processName(pid); name != "" {
			who += ", " + name
		}
	}
	return fmt.Errorf("%w: %s is held by another process (%s); a store is used by one process at a time: stop that process, or set store.dir to another directory",
		ErrInUse, dir, who)
}

// processName returns the command name of process pid, where /proc tells it (Linux), or
// "".
func processName(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
