package loadgen

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// A Process reads the figures the load generator reports about another process (the
// broker under test) from its directory under /proc. Dir is "/proc/PID"; tests point it
// at a fixture.
type Process struct {
	Dir string
}

// ProcessOf returns the Process for pid on this machine.
func ProcessOf(pid int) Process { return Process{Dir: filepath.Join("/proc", strconv.Itoa(pid))} }

// Memory is a process's resident memory, in bytes.
type Memory struct {
	RSS int64 // VmRSS of /proc/PID/status: pages resident, shared ones counted whole
	PSS int64 // Pss of /proc/PID/smaps_rollup: shared pages divided among their sharers
}

// Memory reads VmRSS and Pss. Pss is 0 where the kernel has no smaps_rollup (before 4.14).
func (p Process) Memory() (Memory, error) {
	var m Memory
	f, err := os.Open(filepath.Join(p.Dir, "status"))
	if err != nil {
		return m, err
	}
	m.RSS, err = kBField(f, "VmRSS:")
	f.Close()
	if err != nil {
		return m, fmt.Errorf("loadgen: %s/status: %w", p.Dir, err)
	}
	f, err = os.Open(filepath.Join(p.Dir, "smaps_rollup"))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	} else if err != nil {
		return m, err
	}
	m.PSS, err = kBField(f, "Pss:")
	f.Close()
	if err != nil {
		return m, fmt.Errorf("loadgen: %s/smaps_rollup: %w", p.Dir, err)
	}
	return m, nil
}

// kBField returns, in bytes, the value of the line "NAME   1234 kB" whose first word is
// name, as /proc's status and smaps files write them.
func kBField(r io.Reader, name string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != name {
			continue
		}
		v, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s %q: %w", name, fields[1], err)
		}
		if len(fields) > 2 && fields[2] != "kB" {
			return 0, fmt.Errorf("%s: unit %q, want kB", name, fields[2])
		}
		return v << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s line", name)
}

// CPU returns the CPU time the process has used so far, user and system, from
// /proc/PID/stat, whose figures count clock ticks of ClockTick.
func (p Process) CPU() (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(p.Dir, "stat"))
	if err != nil {
		return 0, err
	}
	ticks, err := parseStatTicks(b)
	if err != nil {
		return 0, fmt.Errorf("loadgen: %s/stat: %w", p.Dir, err)
	}
	return time.Duration(ticks) * ClockTick, nil
}

// parseStatTicks returns utime+stime from the content of /proc/PID/stat. The second field,
// the command name in parentheses, may itself hold spaces and parentheses, so fields are
// counted from the last ')': state is field 3 of proc(5), utime 14 and stime 15.
func parseStatTicks(b []byte) (int64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	fields := strings.Fields(string(b[i+1:]))
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want more than %d", len(fields), stime)
	}
	u, err := strconv.ParseInt(fields[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	s, err := strconv.ParseInt(fields[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return u + s, nil
}

// ClockTick is the unit of /proc's CPU times, what sysconf(_SC_CLK_TCK) returns: the
// kernel passes it to every process in its auxiliary vector (AT_CLKTCK), which is where
// the C library reads it. Linux has used 100 Hz for user space on every architecture for
// decades; that is the fallback when the vector cannot be read.
var ClockTick = time.Second / time.Duration(clockHz())

func clockHz() int64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	if hz := auxvValue(b, atClkTck); hz > 0 {
		return int64(hz)
	}
	return 100
}

const atClkTck = 17 // AT_CLKTCK in <elf.h>

// auxvValue returns the value of key in an auxiliary vector of native-endian words (key,
// value pairs ending with AT_NULL), or 0 when it is absent.
func auxvValue(b []byte, key uint64) uint64 {
	word := int(unsafe.Sizeof(uintptr(0)))
	get := func(p []byte) uint64 {
		if word == 4 {
			return uint64(binary.NativeEndian.Uint32(p))
		}
		return binary.NativeEndian.Uint64(p)
	}
	for len(b) >= 2*word {
		k, v := get(b), get(b[word:])
		if k == 0 {
			break
		}
		if k == key {
			return v
		}
		b = b[2*word:]
	}
	return 0
}
