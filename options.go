package bifrost

import "log/slog"

// An Option changes how New builds a Broker.
type Option func(*Broker)

// WithLogger makes the broker log to l instead of to stderr as cfg.Log describes.
func WithLogger(l *slog.Logger) Option {
	return func(b *Broker) { b.opts.Logger = l }
}

// WithLogLevel gives the level of the logger passed with WithLogger, for Reconfigure to
// change when log.level does; without it, a logger of the embedder keeps its level.
func WithLogLevel(level *slog.LevelVar) Option {
	return func(b *Broker) { b.opts.Level = level }
}

// WithConfigFile names the file the configuration came from, for Reload (SIGHUP and the
// admin API's POST /api/v1/reload) to read again.
func WithConfigFile(path string) Option {
	return func(b *Broker) { b.opts.File = path }
}

// WithAuthenticator makes a decide every CONNECT in place of the configuration's password
// files (the ACL file still applies), and offers methods for MQTT 5 enhanced
// authentication.
func WithAuthenticator(a Authenticator, methods ...AuthMethod) Option {
	return func(b *Broker) { b.opts.Authenticator, b.opts.Methods = a, methods }
}
