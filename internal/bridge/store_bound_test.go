package bridge

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// A storedBroker is an in-process broker on a store directory, with its bridges.
type storedBroker struct {
	b    *broker.Broker
	st   store.Store
	set  *Set
	addr string
}

// startStored runs a broker on the store in dir (engine, sync always) with the bridges
// given; close stops it as bifrost does (bridges, broker, store).
func startStored(t testing.TB, dir, engine string, bridges ...conf.Bridge) *storedBroker {
	t.Helper()
	return startStoredWrap(t, dir, engine, nil, bridges...)
}

// startStoredWrap is startStored with the store wrapped by wrap, if not nil.
func startStoredWrap(t testing.TB, dir, engine string, wrap func(store.Store) store.Store, bridges ...conf.Bridge) *storedBroker {
	t.Helper()
	cfg, log := testConfig(t, func(s *conf.Store) { s.Dir, s.Engine, s.Sync = dir, engine, "always" }, bridges)
	b, err := broker.New(broker.Options{Config: cfg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(cfg.Store, log)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		st = wrap(st)
	}
	sb := &storedBroker{b: b, st: st}
	t.Cleanup(sb.close)
	if err := b.Restore(st); err != nil {
		t.Fatal(err)
	}
	if sb.set, err = Start(cfg.Bridges, b, log, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	sb.addr = b.Listeners()[0].Addr().String()
	return sb
}

func (sb *storedBroker) close() {
	if sb.set != nil {
		sb.set.Close()
	}
	sb.b.Close()
	_ = sb.st.Close()
}

// waiting returns the payloads queued for the remote, oldest first.
func (br *Bridge) waiting() []string {
	br.q.mu.Lock()
	defer br.q.mu.Unlock()
	var out []string
	for _, m := range br.q.inflight {
		out = append(out, string(m.payload()))
	}
	for _, m := range br.q.pending[br.q.head:] {
		out = append(out, string(m.payload()))
	}
	return out
}

// TestStoredQueueBound: with the remote down and the store on, a full queue drops what
// queue_full says (drop_oldest here: the oldest waiting QoS 1 messages) and counts it,
// and the store keeps exactly what the queue kept, in order, across a restart; a restart
// with a lower queue_messages keeps the oldest, drops the newest and counts them, and
// the store forgets them. Both engines.
func TestStoredQueueBound(t *testing.T) {
	for _, engine := range []string{conf.EnginePebble, conf.EngineLog} {
		t.Run(engine, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "store")
			bc := bridgeConf("up", fmt.Sprintf("127.0.0.1:%d", freePort(t)), conf.BridgeV5,
				conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 1})
			bc.QueueMessages, bc.QueueFull = 10, conf.BridgeDropOldest

			sb := startStored(t, dir, engine, bc)
			pub, _ := client(t, sb.addr, "local-pub", true, "")
			for i := range 15 {
				publish(t, pub, "q/m", 1, fmt.Sprintf("m%d", i))
			}
			publish(t, pub, "q/m", 0, "qos0") // no QoS 0 to make room for it, nor QoS 1 to drop for it
			pub.Disconnect(0)
			want := []string{"m5", "m6", "m7", "m8", "m9", "m10", "m11", "m12", "m13", "m14"}
			br := sb.set.Bridges()[0]
			testenv.WaitFor(t, "the QoS 0 message at the bridge", func() bool { return br.Stats().DroppedQoS0 == 1 })
			if st := br.Stats(); st.Depth != 10 || st.Stored != 10 || st.Dropped != 5 || st.DroppedQoS0 != 1 {
				t.Fatalf("remote down, 15 QoS 1 and 1 QoS 0 into 10: %+v", st)
			}
			if got := br.waiting(); !slices.Equal(got, want) {
				t.Fatalf("queued %v, want %v", got, want)
			}
			sb.close()

			sb = startStored(t, dir, engine, bc)
			br = sb.set.Bridges()[0]
			if st := br.Stats(); st.Restored != 10 || st.Stored != 10 || st.Dropped != 0 {
				t.Fatalf("after a restart: %+v, want the 10 kept", st)
			}
			if got := br.waiting(); !slices.Equal(got, want) {
				t.Fatalf("restored %v, want %v", got, want)
			}
			sb.close()

			bc.QueueMessages = 4
			sb = startStored(t, dir, engine, bc)
			br = sb.set.Bridges()[0]
			if st := br.Stats(); st.Restored != 4 || st.Stored != 4 || st.Dropped != 6 {
				t.Fatalf("restarted with queue_messages 4: %+v, want 4 kept and 6 dropped", st)
			}
			sb.close()

			sb = startStored(t, dir, engine, bc)
			br = sb.set.Bridges()[0]
			if got := br.waiting(); !slices.Equal(got, want[:4]) || br.Stats().Dropped != 0 {
				t.Fatalf("the store after the cut holds %v (%+v), want %v", got, br.Stats(), want[:4])
			}
		})
	}
}
