package interop

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// A mode is one way of reaching the broker: a transport and a protocol version.
type mode struct {
	transport string // conf.ListenerTCP or conf.ListenerWS
	version   packet.Version
}

func (m mode) String() string { return m.transport + "/" + m.version.String() }

func (m mode) v5() bool { return m.version == packet.V5 }

// modes are every transport × version a scenario runs in.
var modes = []mode{
	{conf.ListenerTCP, packet.V311},
	{conf.ListenerTCP, packet.V5},
	{conf.ListenerWS, packet.V311},
	{conf.ListenerWS, packet.V5},
}

// Which protocol versions a scenario applies to.
const (
	both = iota
	only311
	only5
)

// A scenario is one behaviour of the broker, checked in every mode it applies to, each
// against a broker of its own configured by tune.
type scenario struct {
	name     string
	versions int
	tune     func(c *conf.Config)
	run      func(t *testing.T, e *env)
}

func (sc scenario) applies(m mode) bool {
	switch sc.versions {
	case only311:
		return m.version == packet.V311
	case only5:
		return m.version == packet.V5
	}
	return true
}

// scenarios is the suite: every bullet of the MQTT semantics the broker promises, grouped
// by the file that holds their code.
var scenarios = concat(
	connectScenarios,
	qosScenarios,
	retainScenarios,
	willScenarios,
	topicScenarios,
	v5Scenarios,
	brokerScenarios,
)

func concat(lists ...[]scenario) []scenario {
	var all []scenario
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

// TestInterop runs every scenario in every mode. Scenarios are parallel to each other, and
// the modes of one scenario run side by side as well: most of the suite's wall time is
// spent waiting for protocol timers (keep alive, will delay, expiry), not computing, so
// they are run concurrently beyond go test's -parallel (which defaults to the CPU count).
func TestInterop(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			var wg sync.WaitGroup
			for _, m := range modes {
				if !sc.applies(m) {
					continue
				}
				wg.Go(func() {
					t.Run(m.String(), func(t *testing.T) {
						sc.run(t, start(t, m, sc.tune))
					})
				})
			}
			wg.Wait()
		})
	}
}

// env is one scenario's broker and the mode its clients use.
type env struct {
	mode
	b    *bifrost.Broker
	tcp  string // host:port of the TCP listener
	ws   string // host:port of the WebSocket listener
	seq  int
	seqM sync.Mutex
}

// start runs a broker on random loopback ports, with a TCP and a WebSocket listener, a
// store directory of its own, no HTTP endpoint and no $SYS unless tune says otherwise. The broker is closed when the test
// ends, after the clients (cleanups run last-registered first).
func start(t *testing.T, m mode, tune func(*conf.Config)) *env {
	t.Helper()
	cfg := conf.Default()
	cfg.Listeners = []conf.Listener{
		{Name: "tcp", Type: conf.ListenerTCP, Address: "127.0.0.1:0"},
		{Name: "ws", Type: conf.ListenerWS, Address: "127.0.0.1:0", Path: "/mqtt"},
	}
	cfg.HTTP.Address = conf.HTTPOff
	cfg.Store.Dir = t.TempDir()
	noSys := conf.Duration(0)
	cfg.SysInterval = &noSys
	if tune != nil {
		tune(cfg)
	}
	b, err := bifrost.New(cfg, bifrost.WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("broker close: %v", err)
		}
	})
	addrs := b.Addrs()
	if len(addrs) != 2 {
		t.Fatalf("broker has %d listeners, want 2", len(addrs))
	}
	return &env{mode: m, b: b, tcp: addrs[0].String(), ws: addrs[1].String()}
}

// testLogger discards the broker's log unless BIFROST_TEST_LOG is set, then logs at debug
// level to stderr.
func testLogger() *slog.Logger {
	if os.Getenv("BIFROST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// id returns a client identifier unique within the scenario.
func (e *env) id(prefix string) string {
	e.seqM.Lock()
	defer e.seqM.Unlock()
	e.seq++
	return fmt.Sprintf("%s-%d", prefix, e.seq)
}
