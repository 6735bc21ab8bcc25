package interop_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestQueueFullFanIn: publishers (paho.mqtt.golang, QoS 1) fan in to one subscriber
// whose message handler blocks, against the bifrost binary with a queue of 20 and a
// window of 10. With queue.when_full: drop the publishers have every PUBACK while the
// messages beyond the queue are dropped: counted and logged with the subscriber's and a
// publisher's client ids. With backpressure the publishers are held (their PUBLISHes
// are not read) until the subscriber takes its queue down, then go on: the subscriber
// gets every message of every publisher, in order, and none is dropped.
func TestQueueFullFanIn(t *testing.T) {
	for _, mode := range []string{conf.QueueDrop, conf.QueueBackpressure} {
		t.Run(mode, func(t *testing.T) {
			b := mqStartProcess(t, func(c *bifrost.Config) {
				c.Queue.OfflineMessages = 20
				c.MQTT.ReceiveMaximum = 10
				c.Queue.WhenFull = mode
				c.Log.Level = "info"
			})
			const pubs, each = 4, 100
			url := "tcp://" + b.tcp
			connect := func(id string, opts func(*mqtt.ClientOptions)) mqtt.Client {
				o := mqtt.NewClientOptions().AddBroker(url).SetClientID(id).SetProtocolVersion(4).
					SetAutoReconnect(false).SetConnectTimeout(testenv.Timeout).SetOrderMatters(true)
				if opts != nil {
					opts(o)
				}
				c := mqtt.NewClient(o)
				if tok := c.Connect(); !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
					t.Fatalf("%s: connect: %v", id, tok.Error())
				}
				t.Cleanup(func() { c.Disconnect(0) })
				return c
			}

			// The subscriber's handler waits for the gate: it acknowledges nothing, and
			// once its window (10) is full the broker queues for it.
			gate := make(chan struct{})
			var mu sync.Mutex
			got := map[int][]int{} // publisher → sequence numbers in arrival order
			received := atomic.Int64{}
			sub := connect("slow", nil)
			tok := sub.Subscribe("fan/#", 1, func(_ mqtt.Client, m mqtt.Message) {
				<-gate
				var p, seq int
				fmt.Sscanf(string(m.Payload()), "%d:%d", &p, &seq)
				mu.Lock()
				got[p] = append(got[p], seq)
				mu.Unlock()
				received.Add(1)
			})
			if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}

			// The publishers' keep alive is 1 s: the broker would close a connection it
			// does not read for 1.5 s if it counted a held one's.
			var acked, lost atomic.Int64
			var wg sync.WaitGroup
			for p := range pubs {
				c := connect(fmt.Sprintf("pub-%d", p), func(o *mqtt.ClientOptions) {
					o.SetKeepAlive(time.Second).SetConnectionLostHandler(func(mqtt.Client, error) { lost.Add(1) })
				})
				wg.Go(func() {
					for seq := range each {
						tok := c.Publish(fmt.Sprintf("fan/%d", p), 1, false, fmt.Sprintf("%d:%d", p, seq))
						if !tok.WaitTimeout(testenv.Timeout) || tok.Error() != nil {
							t.Errorf("pub-%d: publish %d: not acknowledged (%v)", p, seq, tok.Error())
							return
						}
						acked.Add(1)
					}
				})
			}
			published := make(chan struct{})
			go func() { wg.Wait(); close(published) }()

			switch mode {
			case conf.QueueDrop:
				// Every message is acknowledged although the subscriber takes none.
				<-published
				if n := acked.Load(); n != pubs*each {
					t.Fatalf("%d acknowledged, want %d", n, pubs*each)
				}
			case conf.QueueBackpressure:
				// The publishers are held: they stop with messages unacknowledged.
				testenv.WaitFor(t, "a publisher held", func() bool { return scrape(t, b.http)["bifrost_publishers_held"] >= 1 })
				// Held for twice the keep alive's 1.5 s: the connections stay open.
				time.Sleep(3 * time.Second)
				select {
				case <-published:
					t.Fatal("every message acknowledged while the subscriber takes none")
				default:
				}
				if n := lost.Load(); n != 0 || scrape(t, b.http)["bifrost_publishers_held"] < 1 {
					t.Fatalf("while held: %d publishers lost their connection, %v held", n, scrape(t, b.http)["bifrost_publishers_held"])
				}
			}
			close(gate)
			m := scrape(t, b.http)
			dropped := int64(m[`bifrost_messages_dropped_total{reason="queue_full"}`])
			testenv.WaitFor(t, "the publishers to finish", func() bool {
				select {
				case <-published:
					return true
				default:
					return false
				}
			})
			testenv.WaitFor(t, "the subscriber to get what was not dropped", func() bool {
				m = scrape(t, b.http)
				dropped = int64(m[`bifrost_messages_dropped_total{reason="queue_full"}`])
				return received.Load()+dropped == pubs*each
			})

			switch mode {
			case conf.QueueDrop:
				if dropped == 0 {
					t.Fatal("nothing dropped in drop mode")
				}
				lines := linesWith(b.logs.String(), `msg="message dropped"`, "reason=queue_full", "client=slow", "topic=fan/", "qos=1", "from=pub-")
				if len(lines) == 0 {
					t.Fatalf("%d drops, none logged with the client ids:\n%s", dropped, b.logs)
				}
				if len(lines) > 10 {
					t.Fatalf("%d drops logged in %d lines: not rate-limited", dropped, len(lines))
				}
				t.Logf("%d of %d acknowledged messages dropped, in %d log lines: %s", dropped, pubs*each, len(lines), lines[0])
			case conf.QueueBackpressure:
				if dropped != 0 {
					t.Fatalf("%d messages dropped after their PUBACK", dropped)
				}
				for p := range pubs {
					seqs := got[p]
					if len(seqs) != each {
						t.Fatalf("pub-%d: %d messages received, want %d", p, len(seqs), each)
					}
					for i, s := range seqs {
						if s != i {
							t.Fatalf("pub-%d: message %d is %d: lost or out of order (%v)", p, i, s, seqs)
						}
					}
				}
				if n := lost.Load(); n != 0 {
					t.Fatalf("%d publishers lost their connection", n)
				}
				t.Logf("none dropped; publishers held %v times", m["bifrost_publishers_held_total"])
				if m["bifrost_publishers_held"] != 0 || m["bifrost_publishers_held_total"] < 1 {
					t.Fatalf("held %v now, %v in all; want 0 now, at least 1 in all",
						m["bifrost_publishers_held"], m["bifrost_publishers_held_total"])
				}
			}
		})
	}
}

// scrape returns the broker's bifrost_ series from /metrics, by name with labels.
func scrape(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: testenv.Timeout}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "bifrost_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// linesWith returns the lines of log that contain every one of want.
func linesWith(log string, want ...string) []string {
	var out []string
	for line := range strings.Lines(log) {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}
