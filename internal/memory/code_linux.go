package memory

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// madvise advice: MADV_RANDOM, no readahead on a fault (a fault then reads and maps the
// pages near the one touched, not a large chunk of the file); MADV_PAGEOUT (Linux 5.4),
// reclaim the range's pages now.
const (
	madvRandom  = 1
	madvPageout = 21
)

// ReleaseCode asks the kernel to take back the resident pages of the executable's
// read-only mappings (code, read-only data, function tables), and returns how many bytes
// of such mappings it advised. It also turns readahead off for them. The kernel maps a binary's pages in large chunks at start
// (readahead, large folios, fault-around), so a broker just started keeps most of its 38 MB
// binary resident although it runs a few MiB of it (docs/lab/edge.md); once start-up is done
// the pages it uses come back on their first touch, and the rest stays on disk. Clean
// file pages: nothing is written, a page touched again is read again.
func ReleaseCode() (int64, error) {
	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		return 0, fmt.Errorf("memory: release code: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("memory: release code: %w", err)
	}
	defer f.Close()
	// The executable's mappings: its device (major:minor, hex) and inode in each line.
	dev := uint64(exe.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	exeDev, exeIno := fmt.Sprintf("%02x:%02x", major, minor), strconv.FormatUint(exe.Ino, 10)
	var advised int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Contains(fields[1], "w") || fields[3] != exeDev || fields[4] != exeIno {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		a, err1 := strconv.ParseUint(start, 16, 64)
		b, err2 := strconv.ParseUint(end, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			return advised, fmt.Errorf("memory: release code: bad line in /proc/self/maps: %q", sc.Text())
		}
		for _, advice := range []uintptr{madvRandom, madvPageout} {
			if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(a), uintptr(b-a), advice); errno != 0 {
				return advised, fmt.Errorf("memory: release code: madvise %d: %w", advice, errno)
			}
		}
		advised += int64(b - a)
	}
	if err := sc.Err(); err != nil {
		return advised, fmt.Errorf("memory: release code: %w", err)
	}
	return advised, nil
}
