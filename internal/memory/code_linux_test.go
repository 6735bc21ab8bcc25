package memory

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestReleaseCode: after ReleaseCode the test binary's read-only mappings hold fewer
// resident pages than before (the kernel mapped far more of them at start than the test
// runs).
func TestReleaseCode(t *testing.T) {
	before := exeResident(t)
	advised, err := ReleaseCode()
	if err != nil {
		t.Fatal(err)
	}
	after := exeResident(t)
	t.Logf("resident %d KiB before, %d KiB after; %d KiB advised", before, after, advised>>10)
	if advised == 0 {
		t.Fatal("ReleaseCode found no mapping of the executable")
	}
	if after >= before {
		t.Errorf("the executable's resident pages went from %d to %d KiB: nothing released", before, after)
	}
}

// exeResident returns the Rss, in KiB, of this process's read-only mappings of its
// executable, from /proc/self/smaps.
func exeResident(t *testing.T) int64 {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var kib int64
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			in = len(f) >= 6 && f[5] == exe && !strings.Contains(f[1], "w")
		case in && len(f) == 3 && f[0] == "Rss:":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			kib += n
		}
	}
	return kib
}
