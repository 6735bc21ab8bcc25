package bifrost

import (
	"github.com/bifrost-mqtt/bifrost/internal/auth"
	"github.com/bifrost-mqtt/bifrost/internal/server"
)

// Errors returned by Start.
var (
	ErrStarted = server.ErrStarted
	ErrClosed  = server.ErrClosed
	// ErrNotStarted is returned by Reconfigure before Start.
	ErrNotStarted = server.ErrNotStarted
)

// The errors an Authenticator refuses with.
var (
	ErrBadCredentials = auth.ErrBadCredentials // CONNACK 0x86 (3.1.1: 4)
	ErrNotAuthorized  = auth.ErrNotAuthorized  // CONNACK 0x87 (3.1.1: 5)
)
