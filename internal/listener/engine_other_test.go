//go:build !linux

package listener

import "errors"

// upgradesHeld returns the ws connections the engine still holds as not upgraded.
func upgradesHeld(s *Server) int {
	s.hsMu.Lock()
	defer s.hsMu.Unlock()
	return len(s.hs)
}

// openWriteRefused reports whether err is nbio's refusal of what OnOpen wrote beyond what
// the new socket took.
func openWriteRefused(err error) bool { return errors.Is(err, errOpenWrite) }
