package clusterlink

import (
	"errors"
	"testing"
)

// TestNotLinked: without a registered cluster, New refuses and says what to import.
func TestNotLinked(t *testing.T) {
	if _, _, err := New(Env{}); !errors.Is(err, ErrNotLinked) {
		t.Fatalf("New = %v, want ErrNotLinked", err)
	}
}
