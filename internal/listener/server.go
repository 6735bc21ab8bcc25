package listener

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lesismal/nbio"
	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"

	"github.com/bifrost-mqtt/bifrost/internal/conf"
)

// Options configures a Server. Zero values mean the defaults given beside each field.
type Options struct {
	// ConnectTimeout bounds the time from the accept (through the TLS handshake and the
	// WebSocket upgrade) until the handler first calls SetIdleTimeout (after CONNECT),
	// however many bytes the client sends meanwhile. Default 10s.
	ConnectTimeout time.Duration
	// DrainTimeout is how long a Shutdown waits for the peer to close before closing.
	// Default 1s.
	DrainTimeout time.Duration
	// Tick is the timing wheel's resolution: timeouts fire up to two ticks late.
	// Default 250ms.
	Tick time.Duration
	// Logger receives accept errors and the like. Default slog.Default().
	Logger *slog.Logger
	// Pollers is the number of event loops (goroutines) serving every connection.
	// Default runtime.NumCPU().
	Pollers int
	// ReadBufferSize is the read buffer of each poller, shared by all its connections: the
	// most one OnData call delivers. Default 32 KiB.
	ReadBufferSize int
	// MaxWSMessage is the largest WebSocket message accepted; a larger one closes the
	// connection. It bounds what one connection can make the server buffer before the
	// message is complete. Default 4 MiB.
	MaxWSMessage int
	// MaxTLSHandshakes is the most TLS handshakes (tls and wss) in progress at once, each
	// on a goroutine; past it connections wait for a slot without one, or are closed when
	// 4 times as many wait already (tlsgate.go). Default 256.
	MaxTLSHandshakes int
	// Admit, if set, is asked about every accepted connection on the accept goroutine
	// before any work is spent on it (descriptor duplication, TLS handshake, WebSocket
	// upgrade); false closes it at once and nothing else sees it. It must be quick: one
	// accept loop per listener waits for it. The broker's per-address connect rate is
	// checked here, so a flood from one address cannot take the TLS handshake slots.
	Admit func(l *Listener, remote net.Addr) bool
	// CertCheckInterval is how often the certificate, key and client CA files of tls and
	// wss listeners are checked (one stat each) and reloaded when they changed; see also
	// Server.ReloadTLS. Default 10s.
	CertCheckInterval time.Duration
}

// Defaults of Options.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultDrainTimeout   = time.Second
	DefaultTick           = 250 * time.Millisecond
	DefaultReadBufferSize = 32 << 10
	DefaultMaxWSMessage   = 4 << 20
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
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Pollers <= 0 {
		o.Pollers = runtime.NumCPU()
	}
	if o.ReadBufferSize <= 0 {
		o.ReadBufferSize = DefaultReadBufferSize
	}
	if o.MaxWSMessage <= 0 {
		o.MaxWSMessage = DefaultMaxWSMessage
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
	o         Options
	log       *slog.Logger
	wheel     *wheel[conn, *conn]
	done      chan struct{} // closed by Close: stops the wheel

	mu        sync.Mutex
	started   bool // the wheel runs
	closed    bool
	listeners map[*Listener]struct{}
	loop      *loop          // tcp connections (Linux; loop_linux.go), made by the first tcp Listen
	engine    *nbhttp.Engine // ws, tls and wss connections, made by the first such Listen
	upgrader  *websocket.Upgrader

	hsMu   sync.Mutex
	hs     map[*nbio.Conn]*conn // WebSocket connections not yet upgraded
	hsPeak int                  // most entries hs held since it was made

	// reasons holds, by *conn, the error OnClose is to get, where a connection has no
	// room for it: an nbio connection closed while it was being admitted; a connection on
	// our loop closed by closeWith or by an I/O error (io.EOF is a state bit instead).
	reasons sync.Map
	drain   drainer // drain notices (drain.go)

	// TLS, set up by the first tls or wss Listen (s.mu held, before its accept loop runs).
	scratch     []*pumpBufs   // per poller: the buffers of the connection it pumps
	scratchBusy []atomic.Bool // per poller: its scratch is in use (see scratchFor)
	tlsBufs     sync.Pool     // *pumpBufs: the buffers of handshake goroutines
	tlsGate     *tlsGate      // bounds the handshakes in progress (set by New)
	certsWatch  bool          // the certificate watcher runs

	wg      sync.WaitGroup // goroutines started by goroutine
	running atomic.Int32

	closeOnce sync.Once
	closeErr  error
}

// New returns a Server that reports to h. Nothing runs until the first Listen.
func New(h Handler, o Options) *Server {
	o.ensureDefaults()
	nbioOnce.Do(setUpNbio)
	d, _ := h.(Drainer)
	return &Server{
		h:         h,
		onDrained: d,
		o:         o,
		log:       o.Logger,
		wheel:     newWheel[conn](o.Tick, wheelSlots, time.Now()),
		done:      make(chan struct{}),
		listeners: make(map[*Listener]struct{}),
		hs:        make(map[*nbio.Conn]*conn),
		tlsGate:   newTLSGate(o.MaxTLSHandshakes),
	}
}

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
	if l.kind&kindSecure != 0 && s.engine == nil {
		if err := s.startEngine(); err != nil {
			return nil, err
		}
	}
	l.ln, err = net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("listener: %s: %w", l.name, err)
	}
	var step func() error
	switch {
	case l.kind&kindSecure != 0:
		s.startTLS()
		step = l.acceptStd(s.admitTLS)
	default: // tcp, ws
		step, err = s.acceptPlain(l)
		if err != nil {
			_ = l.ln.Close()
			return nil, fmt.Errorf("listener: %s: %w", l.name, err)
		}
	}
	s.listeners[l] = struct{}{}
	s.goroutine("accept "+l.name, func() { l.acceptLoop(step) })
	return l, nil
}

// startTLS makes the pollers' TLS buffers and starts the certificate watcher, once.
// s.mu is held.
func (s *Server) startTLS() {
	if s.certsWatch {
		return
	}
	s.certsWatch = true
	s.scratch = make([]*pumpBufs, s.o.Pollers)
	s.scratchBusy = make([]atomic.Bool, s.o.Pollers)
	for i := range s.scratch {
		s.scratch[i] = newPumpBufs(s.o.ReadBufferSize)
	}
	size := s.o.ReadBufferSize
	s.tlsBufs.New = func() any { return newPumpBufs(size) }
	s.goroutine("tls certificates", s.watchCerts)
}

// scratchFor returns the TLS buffers of the poller that serves nc, and a function to give
// them back. nbio (v1.6.12, Engine.AddConn) gives a connection to poller fd mod pollers,
// so only that poller uses them; the busy flag makes sure of it, falling back to pooled
// buffers if that ever changed.
func (s *Server) scratchFor(nc *nbio.Conn) (*pumpBufs, func()) {
	i := nc.Hash() % len(s.scratch)
	if s.scratchBusy[i].CompareAndSwap(false, true) {
		return s.scratch[i], func() { s.scratchBusy[i].Store(false) }
	}
	b := s.tlsBufs.Get().(*pumpBufs)
	return b, func() { s.tlsBufs.Put(b) }
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
		lp, engine := s.loop, s.engine
		s.mu.Unlock()

		var errs []error
		for _, l := range ls {
			if err := l.stop(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		if lp != nil {
			lp.stop() // closes its connections, delivering their OnClose, and returns
		}
		if engine != nil {
			// Stop closes every connection and waits for their close hooks, then stops
			// the pollers, which deliver any OnClose handed to them before they exit.
			engine.Stop()
		}
		s.closeDrain()
		close(s.done)
		s.wg.Wait()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// startEngine creates and starts the nbio engine. s.mu is held.
func (s *Server) startEngine() error {
	e := nbhttp.NewEngine(nbhttp.Config{
		Name:                    "bifrost",
		NPoller:                 s.o.Pollers,
		ReadBufferSize:          s.o.ReadBufferSize,
		ReadLimit:               s.o.MaxWSMessage + 64, // a frame's header and a partial next one
		Handler:                 http.HandlerFunc(s.serveHTTP),
		ServerExecutor:          func(f func()) { f() }, // run parsed requests and messages in the poller
		SupportServerOnly:       true,
		ReleaseWebsocketPayload: true,
		// nbio reads a socket at most this many times per readiness event, and closes it
		// when the same event also reports the peer's hang-up: bytes beyond the reads are
		// lost. nbio's default, 3 (96 KiB here), loses the end of a large PUBLISH and the
		// DISCONNECT of a client that sends them and closes at once (mosquitto_pub -s).
		// 256 reads (8 MiB) cover any socket receive buffer the kernel grants by default,
		// while one client flooding a poller still yields it after 8 MiB.
		MaxConnReadTimesPerEventLoop: 256,
	})
	e.Engine.OnOpen(s.onOpen)
	e.Engine.OnData(s.onData)
	e.Engine.OnWrittenSize(s.onWritten)
	e.OnClose(s.onClose)
	s.engine, s.upgrader = e, s.newUpgrader(e) // before Start: the pollers read them
	if err := e.Start(); err != nil {
		s.engine, s.upgrader = nil, nil
		return fmt.Errorf("listener: starting the event loops: %w", err)
	}
	if err := s.awaitPollers(); err != nil {
		// Not stopped: Stop hangs on a poller that has not started (see awaitPollers).
		s.engine, s.upgrader = nil, nil
		return err
	}
	return nil
}

// goroutine starts f in a goroutine that Close waits for, counted in s.running and
// labelled for profiles. Every goroutine of ours goes through here; nbio's pollers are
// started by nbio (Options.Pollers of them).
func (s *Server) goroutine(name string, f func()) {
	s.wg.Add(1)
	s.running.Add(1)
	go func() {
		defer func() {
			s.running.Add(-1)
			s.wg.Done()
		}()
		pprof.Do(context.Background(), pprof.Labels("bifrost", name), func(context.Context) { f() })
	}()
}

// forget drops a stopped listener.
func (s *Server) forget(l *Listener) {
	s.mu.Lock()
	delete(s.listeners, l)
	s.mu.Unlock()
}

// closeConns closes every connection of l, upgraded or not.
func (s *Server) closeConns(l *Listener) {
	var cs []*conn
	s.wheel.each(func(c *conn) {
		if c.l == l {
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

// expire is the wheel's verdict on c: its timeout, or its Shutdown drain, has run out.
func (s *Server) expire(c *conn) {
	if c.state.Load()&stShutdown != 0 {
		_ = c.closeWith(nil)
		return
	}
	_ = c.closeWith(ErrIdleTimeout)
}

// connOf returns our record of an open (or opening) connection, or nil.
func connOf(nc *nbio.Conn) *conn {
	switch x := nc.Session().(type) {
	case *conn:
		return x
	case *tlsConn:
		return &x.conn
	case *websocket.Conn:
		c, _ := x.Session().(*conn)
		return c
	}
	return nil
}

// onOpen is nbio's open hook, called in the accept goroutine once the poller is chosen and
// before the socket is polled: nothing can be read before it returns.
func (s *Server) onOpen(nc *nbio.Conn) {
	switch x := nc.Session().(type) {
	case *conn: // TCP
		x.open()
	case *nbhttp.Parser: // WebSocket before the upgrade: only the connect timeout
		if c := s.handshake(nc, false); c != nil {
			s.wheel.set(c, s.o.ConnectTimeout)
		}
	case *tlsConn: // before the handshake: only the connect timeout
		s.wheel.set(&x.conn, s.o.ConnectTimeout)
	}
}

// onData is nbio's data hook, called in the poller with bytes read into its buffer.
func (s *Server) onData(nc *nbio.Conn, data []byte) {
	switch x := nc.Session().(type) {
	case *conn:
		x.onData(data)
	case *tlsConn:
		buf, done := s.scratchFor(nc)
		x.received(data, buf)
		done()
	case pollerProbe:
		x.ready <- x.i
	case *websocket.Conn:
		s.engine.DataHandler(nc, data)
	default: // HTTP: a WebSocket connection before its upgrade
		// Taking hsMu orders this poller after admitWS for the race detector, which does
		// not see the hand-off through epoll; reads of this kind are few.
		s.handshake(nc, false)
		s.engine.DataHandler(nc, data)
	}
}

// onWritten is nbio's hook for bytes that reached the socket, called with nc locked.
func (s *Server) onWritten(nc *nbio.Conn, _ []byte, n int) {
	if c := connOf(nc); c != nil {
		c.written(n)
	}
}

// onClose is nbhttp's close hook, called once per connection after nbio closed it.
func (s *Server) onClose(netc net.Conn, _ error) {
	nc, ok := netc.(*nbio.Conn)
	if !ok {
		return
	}
	if t, ok := nc.Session().(*tlsConn); ok {
		t.ended()
		return
	}
	c := connOf(nc)
	if c == nil {
		c = s.handshake(nc, true)
	}
	if c != nil {
		c.closed()
	}
}

// handshake returns the record of a WebSocket connection not yet upgraded, and forgets it
// if take.
func (s *Server) handshake(nc *nbio.Conn, take bool) *conn {
	s.hsMu.Lock()
	c := s.hs[nc]
	if take && c != nil {
		delete(s.hs, nc)
		s.hsPeak = max(s.hsPeak, len(s.hs)+1)
		if len(s.hs) == 0 && s.hsPeak > 256 {
			// A map never shrinks: let a storm's buckets go once it has passed.
			s.hs, s.hsPeak = make(map[*nbio.Conn]*conn), 0
		}
	}
	s.hsMu.Unlock()
	return c
}

// nbioLog sends nbio's log, which is global to the process, to slog.Default: its Info and
// Debug lines (engine start and stop) at Debug, the others at their level. Installed once,
// by the first New.
type nbioLog struct{}

var nbioOnce sync.Once

// setUpNbio points nbio's process-wide log at slog (nbioLog), once.
func setUpNbio() { logging.SetLogger(nbioLog{}) }

func (nbioLog) Debug(format string, v ...any) { nbioLogAt(slog.LevelDebug, format, v) }
func (nbioLog) Info(format string, v ...any)  { nbioLogAt(slog.LevelDebug, format, v) }
func (nbioLog) Warn(format string, v ...any)  { nbioLogAt(slog.LevelWarn, format, v) }
func (nbioLog) Error(format string, v ...any) { nbioLogAt(slog.LevelError, format, v) }

func nbioLogAt(level slog.Level, format string, v []any) {
	l := slog.Default()
	if l.Enabled(context.Background(), level) {
		l.Log(context.Background(), level, fmt.Sprintf(format, v...), slog.String("component", "nbio"))
	}
}
