package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// Options configures a Server. Zero values mean the defaults given beside each field.
type Options struct {
	// ConnectTimeout bounds the time from the accept (through the TLS handshake and the
	// WebSocket upgrade) until the handler first calls SetIdleTimeout (after CONNECT),
	// however many bytes the client sends meanwhile. Default 10s.
	ConnectTimeout time.Duration
	// LingerTimeout is how long a Shutdown waits for the peer to close before closing.
	// Default 1s.
	LingerTimeout time.Duration
	// Tick is the timing wheel's resolution: timeouts fire up to two ticks late.
	// Default 250ms.
	Tick time.Duration
	// Logger receives accept errors and the like. Default slog.Default().
	Logger *slog.Logger
	// Pollers is the number of event loops (goroutines) serving every connection on the
	// epoll engine. The portable engine has none: each connection has a goroutine that
	// reads it. Default GOMAXPROCS: the CPUs the process may use (the runtime reads a
	// container's CPU quota), not the host's.
	Pollers int
	// ReadBufferSize is the read buffer of each poller, shared by all its connections: the
	// most one OnData call delivers. On the portable engine each connection's buffer
	// follows its traffic, from 1 KiB up to this size. Default 32 KiB.
	ReadBufferSize int
	// MaxTLSHandshakes is the most TLS handshakes (tls and wss) in progress at once, each
	// on a goroutine; past it connections wait for a slot without one, or are closed when
	// 4 times as many wait already (tls_gate.go). Default 256.
	MaxTLSHandshakes int
	// Admit, if set, is asked about every accepted connection on the accept goroutine
	// before any work is spent on it (descriptor duplication, TLS handshake, WebSocket
	// upgrade); false closes it at once and nothing else sees it. It must be quick: one
	// accept loop per listener waits for it. The broker's per-address connect rate is
	// checked here, so a flood from one address cannot take the TLS handshake slots.
	// remote is the client's address, IPv4 unmapped; a value, so asking costs nothing.
	Admit func(l *Listener, remote netip.Addr) bool
	// DrainedAt is the most bytes a connection may have queued (Buffered) and count as
	// drained for NotifyDrained. A handler that stops writing to a connection while more
	// than a threshold waits in it (the broker, for a slow consumer) sets it to that
	// threshold, to hear as soon as it may write again: other writes (QoS 0, which the
	// broker writes up to the threshold) can keep the queue from ever emptying. Default
	// 0: nothing queued.
	DrainedAt int
	// CertCheckInterval is how often the certificate, key and client CA files of tls and
	// wss listeners are checked (one stat each) and reloaded when they changed; see also
	// Server.ReloadTLS. Default 10s.
	CertCheckInterval time.Duration
	// WriteFence, if set, says whether the connections the handler has admitted (those
	// it called SetIdleTimeout on) may be written to now. It is asked before every write
	// to such a connection's socket, from its write path and its poller, with the write
	// lock held, so it must be quick (the broker's: the clock and an atomic load). When it
	// says no, nothing more reaches that socket, not even the bytes queued for it: they
	// are dropped and the connection is closed (OnClose gets ErrWriteFenced). Connections
	// not admitted (a CONNACK refusing the client) are written to as ever. The broker of a
	// cluster node fences with its lease: a node that lost it, paused past it perhaps,
	// writes nothing more to its clients. Default nil: no fence, at the cost of one nil
	// test per write.
	WriteFence func() bool
}

// Defaults of Options.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultLingerTimeout  = time.Second
	DefaultTick           = 250 * time.Millisecond
	DefaultReadBufferSize = 32 << 10
	DefaultCertCheck      = 10 * time.Second
	DefaultTLSHandshakes  = 256
)

// wheelSlots is the number of slots: with the default tick the wheel turns once in 128 s,
// longer than most keepalives, so most entries are visited once per timeout.
const wheelSlots = 512

func (o *Options) ensureDefaults() {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.LingerTimeout <= 0 {
		o.LingerTimeout = DefaultLingerTimeout
	}
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Pollers <= 0 {
		o.Pollers = runtime.GOMAXPROCS(0)
	}
	if o.ReadBufferSize <= 0 {
		o.ReadBufferSize = DefaultReadBufferSize
	}
	if o.CertCheckInterval <= 0 {
		o.CertCheckInterval = DefaultCertCheck
	}
	if o.MaxTLSHandshakes <= 0 {
		o.MaxTLSHandshakes = DefaultTLSHandshakes
	}
}

// Server owns the event loops and all listeners. The loops start with the first Listen.
type Server struct {
	h         Handler
	onDrained Drainer // h, if it is one
	batcher   Batcher // h, if it is one
	o         Options
	log       *slog.Logger
	wheel     *wheel[conn, *conn]
	done      chan struct{} // closed by Close: stops the wheel

	mu         sync.Mutex
	started    bool // the wheel runs
	closed     bool
	listeners  map[*Listener]struct{}
	eventLoops // the engine's state: the epoll loop (epoll_loop_linux.go) or the portable engine's (portable_engine.go)

	// reasons holds, by *conn, the error OnClose is to get, where a connection has no
	// room for it: a connection closed by closeWith or by an I/O error (io.EOF is a state
	// bit instead).
	reasons sync.Map
	drain   drainer // drain notices (drain.go)

	// TLS, set up by the first tls or wss Listen (s.mu held, before its accept loop runs).
	tlsBufs    sync.Pool // *pumpBufs: the buffers of handshake goroutines
	tlsGate    *tlsGate  // bounds the handshakes in progress (set by New)
	certsWatch bool      // the certificate watcher runs

	wg      sync.WaitGroup // goroutines started by goroutine
	running atomic.Int32

	closeOnce sync.Once
	closeErr  error

	connectTimeout atomic.Int64 // Options.ConnectTimeout, changed by SetConnectTimeout
}

// New returns a Server that reports to h. Nothing runs until the first Listen.
func New(h Handler, o Options) *Server {
	o.ensureDefaults()
	d, _ := h.(Drainer)
	bt, _ := h.(Batcher)
	s := &Server{
		h:         h,
		onDrained: d,
		batcher:   bt,
		o:         o,
		log:       o.Logger,
		wheel:     newWheel[conn](o.Tick, wheelSlots, time.Now()),
		done:      make(chan struct{}),
		listeners: make(map[*Listener]struct{}),
		tlsGate:   newTLSGate(o.MaxTLSHandshakes),
	}
	s.connectTimeout.Store(int64(o.ConnectTimeout))
	return s
}

// SetConnectTimeout changes Options.ConnectTimeout for the connections accepted from now
// on (a reload); d <= 0 is the default.
func (s *Server) SetConnectTimeout(d time.Duration) {
	if d <= 0 {
		d = DefaultConnectTimeout
	}
	s.connectTimeout.Store(int64(d))
}

// connectTimeoutNow is the connect timeout of a connection accepted now.
func (s *Server) connectTimeoutNow() time.Duration { return time.Duration(s.connectTimeout.Load()) }

// Pollers returns the number of pollers, the loops a Batcher is told about.
func (s *Server) Pollers() int { return s.o.Pollers }

// TLSHandshakes reports the TLS handshakes running now, the connections waiting for a
// handshake slot (a few of them may have closed since), and the connections refused so
// far because every slot was taken and the queue full (Options.MaxTLSHandshakes).
func (s *Server) TLSHandshakes() (running, waiting int, refused uint64) {
	return s.tlsGate.stats()
}

// Listen starts one endpoint from config; the address may use port 0 (see Listener.Addr).
func (s *Server) Listen(cfg conf.Listener) (*Listener, error) {
	l, err := newListener(s, cfg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrServerClosed
	}
	if !s.started {
		s.started = true
		s.goroutine("timing wheel", func() { s.wheel.run(s.done, s.expire) })
	}
	l.ln, err = net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("listener: %s: %w", l.name, err)
	}
	step, err := s.acceptStep(l)
	if err != nil {
		_ = l.ln.Close()
		return nil, fmt.Errorf("listener: %s: %w", l.name, err)
	}
	if l.kind&kindSecure != 0 {
		s.startTLS()
	}
	s.listeners[l] = struct{}{}
	s.goroutine("accept "+l.name, func() { l.acceptLoop(step) })
	return l, nil
}

// startTLS sets up the TLS buffers and starts the certificate watcher, once. s.mu is held.
func (s *Server) startTLS() {
	if s.certsWatch {
		return
	}
	s.certsWatch = true
	size := s.o.ReadBufferSize
	s.tlsBufs.New = func() any { return newPumpBufs(size) }
	s.goroutine("tls certificates", s.watchCerts)
}

// Close stops accepting on every listener and closes every connection (OnClose for each,
// all delivered when Close returns), then stops the loops. Idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		ls := make([]*Listener, 0, len(s.listeners))
		for l := range s.listeners {
			ls = append(ls, l)
		}
		s.mu.Unlock()

		var errs []error
		for _, l := range ls {
			if err := l.stop(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		s.stopLoops() // closes every connection, delivering their OnClose, and returns
		s.closeDrain()
		close(s.done)
		s.wg.Wait()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// goroutine starts f in a goroutine that Close waits for, counted in s.running and
// labelled for profiles with name. Every goroutine of ours goes through here or spawn.
func (s *Server) goroutine(name string, f func()) {
	s.spawn(goroutineLabels(name), f)
}

// goroutineLabels returns the profile labels of a goroutine called name.
func goroutineLabels(name string) context.Context {
	return pprof.WithLabels(context.Background(), pprof.Labels("bifrost", name))
}

// spawn is goroutine with labels made beforehand (goroutineLabels): the portable engine
// starts a goroutine per connection, where a label set each would cost every connection.
func (s *Server) spawn(labels context.Context, f func()) {
	s.wg.Add(1)
	s.running.Add(1)
	go func() {
		defer func() {
			s.running.Add(-1)
			s.wg.Done()
		}()
		pprof.SetGoroutineLabels(labels)
		f()
	}()
}

// forget drops a stopped listener.
func (s *Server) forget(l *Listener) {
	s.mu.Lock()
	delete(s.listeners, l)
	s.mu.Unlock()
}

// closeConns closes every connection of l, upgraded or not, except those shutting down
// (Conn.Shutdown), which finish sending what they queued (a DISCONNECT) within the linger
// timeout.
func (s *Server) closeConns(l *Listener) {
	var cs []*conn
	s.wheel.each(func(c *conn) {
		if c.l == l && c.state.Load()&stShutdown == 0 {
			cs = append(cs, c)
		}
	})
	for _, c := range cs {
		_ = c.closeWith(nil)
	}
}

// ReloadTLS reloads the certificate, key and client CAs of every tls and wss listener
// from their files now, whether or not they look changed (cmd/bifrost calls it on SIGHUP).
// Open connections keep the certificate they were made with; new handshakes get the new
// one. A listener whose files do not load keeps its certificate; the errors, one per such
// listener, are logged and returned together.
func (s *Server) ReloadTLS() error {
	var errs []error
	for _, l := range s.tlsListeners() {
		if err := l.certs.reload(true); err != nil {
			s.log.Error("listener: TLS reload failed; keeping the current certificate",
				slog.String("listener", l.name), slog.Any("err", err))
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// watchCerts reloads a TLS listener's certificate when its files change, checking them
// every Options.CertCheckInterval, until the Server closes. A change that does not load
// (a key written after its certificate, a bad file) is logged once and retried at every
// check; the listener keeps its certificate meanwhile.
func (s *Server) watchCerts() {
	t := time.NewTicker(s.o.CertCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		for _, l := range s.tlsListeners() {
			if err := l.certs.reload(false); err != nil {
				s.log.Error("listener: TLS files changed but do not load; keeping the current certificate",
					slog.String("listener", l.name), slog.Any("err", err))
			}
		}
	}
}

// tlsListeners returns the open tls and wss listeners.
func (s *Server) tlsListeners() []*Listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ls []*Listener
	for l := range s.listeners {
		if l.certs != nil {
			ls = append(ls, l)
		}
	}
	return ls
}

// expire is the wheel's verdict on c: its timeout, or its Shutdown linger, has run out.
func (s *Server) expire(c *conn) {
	if s.renewPaused(c) {
		return // its keep alive waits unread in the socket (pause.go)
	}
	if c.state.Load()&stShutdown != 0 {
		_ = c.closeWith(nil)
		return
	}
	_ = c.closeWith(ErrIdleTimeout)
}
