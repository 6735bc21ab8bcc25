package httplink

import (
	"errors"
	"testing"
)

// TestNotLinked: without a registered endpoint, Listen refuses and says what to import.
func TestNotLinked(t *testing.T) {
	if _, err := Listen(Env{}); !errors.Is(err, ErrNotLinked) {
		t.Fatalf("Listen = %v, want ErrNotLinked", err)
	}
}
