package loadgen

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestProcessMemory(t *testing.T) {
	m, err := Process{Dir: "testdata/proc/4242"}.Memory()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Memory{RSS: 38576 << 10, PSS: 29826 << 10}); m != want {
		t.Fatalf("Memory() = %+v, want %+v", m, want)
	}
}

func TestProcessCPU(t *testing.T) {
	d, err := Process{Dir: "testdata/proc/4242"}.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if want := (1234 + 567) * ClockTick; d != want {
		t.Fatalf("CPU() = %v, want %v (utime 1234 + stime 567 ticks of %v)", d, want, ClockTick)
	}
}

func TestParseStatTicks(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       int64
		err        bool
	}{
		{name: "plain", stat: "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 10 20 0 0 20 0", want: 30},
		{name: "spaces and parentheses in the name", stat: "7 (a) b (c)) R 0 1 1 0 -1 0 0 0 0 0 5 6 0 0", want: 11},
		{name: "no name", stat: "7 a R 0", err: true},
		{name: "short", stat: "7 (a) R 0 1 1", err: true},
		{name: "not a number", stat: "7 (a) R 0 1 1 0 -1 0 0 0 0 0 x 6 0 0", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatTicks([]byte(tc.stat))
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("parseStatTicks = %d, %v; want %d, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestKBField(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int64
		err      bool
	}{
		{name: "found", in: "VmHWM:\t 10 kB\nVmRSS:\t  3 kB\n", want: 3 << 10},
		{name: "prefix of another name", in: "VmRSSx: 1 kB\n", err: true},
		{name: "missing", in: "Name: x\n", err: true},
		{name: "other unit", in: "VmRSS: 3 MB\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kBField(strings.NewReader(tc.in), "VmRSS:")
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("kBField = %d, %v; want %d, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestAuxvValue(t *testing.T) {
	word := int(unsafe.Sizeof(uintptr(0)))
	put := func(b []byte, v uint64) []byte {
		w := make([]byte, word)
		if word == 4 {
			binary.NativeEndian.PutUint32(w, uint32(v))
		} else {
			binary.NativeEndian.PutUint64(w, v)
		}
		return append(b, w...)
	}
	var b []byte
	for _, kv := range [][2]uint64{{6, 4096}, {atClkTck, 250}, {0, 0}, {atClkTck, 999}} {
		b = put(put(b, kv[0]), kv[1])
	}
	if got := auxvValue(b, atClkTck); got != 250 {
		t.Errorf("AT_CLKTCK = %d, want 250", got)
	}
	if got := auxvValue(b, 99); got != 0 {
		t.Errorf("absent key = %d, want 0 (AT_NULL ends the vector)", got)
	}
	if got := auxvValue(b[:word], atClkTck); got != 0 {
		t.Errorf("truncated vector = %d, want 0", got)
	}
}

// TestSelf reads this process's own figures, as a run reads the broker's.
func TestSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	p := ProcessOf(os.Getpid())
	m, err := p.Memory()
	if err != nil || m.RSS <= 0 {
		t.Fatalf("Memory() = %+v, %v", m, err)
	}
	if _, err := p.CPU(); err != nil {
		t.Fatal(err)
	}
	if ClockTick <= 0 || ClockTick > time.Second {
		t.Fatalf("ClockTick = %v", ClockTick)
	}
}
