package bifrost

import "github.com/bifrost-mqtt/bifrost/internal/auth"

// The authentication hook for embedders: a Go program that hosts the broker may decide
// CONNECTs itself (WithAuthenticator) instead of, or before adding, a password file.
type (
	// Authenticator decides a CONNECT; Authenticate may block (it runs on a small pool
	// of goroutines, never on an event loop) and returns ErrBadCredentials or
	// ErrNotAuthorized to refuse.
	Authenticator = auth.Authenticator
	// AuthRequest is what a client presents at CONNECT.
	AuthRequest = auth.Request
	// AuthResult is who the client is: Username is its identity for the ACL, and the
	// owner of the sessions it makes (docs/admin.md, "Who owns a session").
	AuthResult = auth.Result
	// AuthMethod is an MQTT 5 enhanced authentication method.
	AuthMethod = auth.Method
	// AuthExchange is one enhanced authentication conversation of an AuthMethod.
	AuthExchange = auth.Exchange
)

// HashPassword returns the record of password for an Auth.PasswordFile, whose lines read
// user:record: a bcrypt hash at the default cost, as `bifrost passwd` writes it. password
// is 1 to 72 bytes.
func HashPassword(password string) (string, error) { return auth.HashPassword([]byte(password), 0) }
