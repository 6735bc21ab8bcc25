package bridge

import (
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/metrics"
	"github.com/bifrost-mqtt/bifrost/internal/store"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// BenchmarkStoredQueue queues b.N QoS 1 messages (64-byte payloads, topic q/m) for a
// remote Mosquitto that is down, on a broker whose store is on (sync: always), then
// starts Mosquitto and lets the bridge drain the queue (max_inflight 20). It reports
// what a queued message costs the store (store-B/msg: the bytes of the batches that
// queued it, disk-B/msg: what the engine wrote for them; ack-B/msg: the batches that
// deleted it after the remote's PUBACK) and how fast the queue drains (drain-msgs/s,
// from the bridge's connection to the last PUBACK, polled every 20 ms at most).
// Store=off is the same with the queue in memory. Run with a fixed count:
//
//	go test -run '^$' -bench StoredQueue -benchtime 20000x ./internal/bridge
func BenchmarkStoredQueue(b *testing.B) {
	for _, engine := range []string{conf.StoreOff, conf.EnginePebble, conf.EngineLog} {
		name := "Store=" + engine
		if engine != conf.StoreOff {
			name = "Store=" + engine + "/Sync=always"
		}
		b.Run(name, func(b *testing.B) {
			mq := startMosquitto(b, "")
			mq.stop(syscall.SIGTERM)
			bc := bridgeConf("up", mq.addr(), conf.BridgeV5, conf.BridgeTopic{Pattern: "q/#", Direction: conf.BridgeOut, QoS: 1})
			bc.QueueMessages, bc.QueueBytes = 1<<22, 1<<30
			var sb *storedBroker
			if engine == conf.StoreOff {
				b2, addr, set := startBifrost(b, bc)
				sb = &storedBroker{b: b2, set: set, addr: addr}
			} else {
				sb = startStored(b, filepath.Join(b.TempDir(), "store"), engine, bc)
			}
			br := sb.set.Bridges()[0]
			pub, _ := client(b, sb.addr, "local-pub", true, "")
			payload := string(make([]byte, 64))
			w0, d0 := storeWritten(b, sb.st)
			b.ResetTimer()
			for i := 0; i < b.N; {
				toks := make([]paho.Token, 0, 100)
				for ; i < b.N && len(toks) < cap(toks); i++ {
					toks = append(toks, pub.Publish("q/m", 1, false, payload[:64-len(strconv.Itoa(i))]+strconv.Itoa(i)))
				}
				for _, tok := range toks {
					if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
						b.Fatalf("local publish: %v", tok.Error())
					}
				}
			}
			w1, d1 := storeWritten(b, sb.st)
			if st := br.Stats(); st.Depth != b.N || st.Dropped != 0 {
				b.Fatalf("queued: %+v", st)
			}
			mq.start()
			testenv.WaitFor(b, "the bridge's connection", func() bool { return br.Stats().Up })
			start := time.Now()
			testenv.WaitFor(b, "the queue to drain", func() bool { return br.Stats().Depth == 0 })
			took := time.Since(start)
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(n/took.Seconds(), "drain-msgs/s")
			if sb.st == nil {
				return
			}
			sb.b.Journal().Commit()
			sb.b.Journal().Wait()
			w2, _ := storeWritten(b, sb.st)
			b.ReportMetric((w1-w0)/n, "store-B/msg")
			b.ReportMetric((d1-d0)/n, "disk-B/msg")
			b.ReportMetric((w2-w1)/n, "ack-B/msg")
		})
	}
}

// storeWritten returns the store's bifrost_store_written_bytes_total and
// bifrost_store_disk_written_bytes_total.
func storeWritten(t testing.TB, st store.Store) (written, disk float64) {
	t.Helper()
	if st == nil {
		return 0, 0
	}
	sums, err := metrics.Gather(store.Collector(st))
	if err != nil {
		t.Fatal(err)
	}
	return sums["bifrost_store_written_bytes_total"][""], sums["bifrost_store_disk_written_bytes_total"][""]
}
