package diskspace

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

var errKind = errors.New("kind")

// TestNoSpace: a full disk becomes an Error that names what was being done, the space it
// needs and the advice, and matches its kind and its cause; any other error is returned
// as it is.
func TestNoSpace(t *testing.T) {
	dir := t.TempDir()
	cause := &fs.PathError{Op: "write", Path: dir + "/000005.sst", Err: syscall.ENOSPC}
	err := NoSpace(errKind, "db: open", dir, "writing the table", 3<<20, "free space there", cause)
	want := "db: open " + dir + ": no space left on device: writing the table needs up to 3.0 MiB free"
	if _, ok := Free(dir); ok {
		want += ", and its file system has "
	}
	if !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "; free space there: "+cause.Error()) {
		t.Errorf("error %q, want it to start with %q and end with the advice and the cause", err, want)
	}
	if !errors.Is(err, errKind) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("%v matches its kind %v and ENOSPC %v; want both", err, errors.Is(err, errKind), errors.Is(err, syscall.ENOSPC))
	}
	if err := NoSpace(errKind, "db: open", dir, "writing", 0, "", cause); !strings.Contains(err.Error(), "writing needs room to write") {
		t.Errorf("need unknown: %q", err)
	}
	other := &fs.PathError{Op: "write", Path: "x", Err: syscall.EIO}
	if err := NoSpace(errKind, "db: open", dir, "writing", 0, "", other); err != other {
		t.Errorf("NoSpace of EIO = %v, want it as it is", err)
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 812: "812 B", 2100: "2.1 KiB", 8_283_750: "7.9 MiB", 5 << 30: "5.0 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
