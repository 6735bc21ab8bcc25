package cluster

import (
	"testing"

	"github.com/bifrost-mqtt/bifrost/internal/cluster/fsm"
)

const idA = "0123456789abcdef0123456789abcdef"

func TestClusterIDFile(t *testing.T) {
	dir := t.TempDir()
	if id, err := readClusterID(dir); err != nil || id != "" {
		t.Fatalf("empty dir: %q, %v", id, err)
	}
	if err := writeClusterID(dir, idA); err != nil {
		t.Fatal(err)
	}
	if id, err := readClusterID(dir); err != nil || id != idA {
		t.Fatalf("read back %q, %v", id, err)
	}
	if a, b := newClusterID(), newClusterID(); !fsm.ValidClusterID(a) || a == b {
		t.Fatal("newClusterID does not make valid, distinct ids")
	}
}
