package hostile

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// healthy is the innocent bystander: an Eclipse Paho (paho.mqtt.golang, MQTT 3.1.1) client
// connected beside the attacker that publishes QoS 1 messages to a topic it subscribes to,
// one after the other, every roundGap, for as long as the case runs. Each message must come
// back within testenv.Timeout; check proves that rounds went on completing through the attack.
type healthy struct {
	c      mqtt.Client
	got    chan string
	lost   atomic.Bool
	rounds atomic.Int64
	fails  atomic.Int64

	mu     sync.Mutex
	maxRTT time.Duration
	failed string // the first failure

	stop chan struct{}
	done chan struct{}
}

const roundGap = 20 * time.Millisecond

// healthy connects the bystander and starts its rounds; they stop when the test ends.
func (e *env) healthy(t testing.TB) *healthy {
	t.Helper()
	h := &healthy{got: make(chan string, 64), stop: make(chan struct{}), done: make(chan struct{})}
	const topic = "healthy/round"
	co := mqtt.NewClientOptions().AddBroker("tcp://" + e.addr).SetClientID("healthy").SetCleanSession(true).
		SetProtocolVersion(4).SetKeepAlive(30 * time.Second).SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(testenv.Timeout).SetOrderMatters(false).
		SetConnectionLostHandler(func(mqtt.Client, error) { h.lost.Store(true) })
	h.c = mqtt.NewClient(co)
	wait(t, "healthy connect", h.c.Connect())
	wait(t, "healthy subscribe", h.c.Subscribe(topic, 1, func(_ mqtt.Client, m mqtt.Message) {
		select {
		case h.got <- string(m.Payload()):
		default:
		}
	}))
	go h.run(topic)
	t.Cleanup(func() {
		close(h.stop)
		<-h.done
		h.c.Disconnect(0)
	})
	return h
}

// run publishes round after round until stopped.
func (h *healthy) run(topic string) {
	defer close(h.done)
	for seq := 0; ; seq++ {
		select {
		case <-h.stop:
			return
		case <-time.After(roundGap):
		}
		payload := strconv.Itoa(seq)
		t0 := time.Now()
		if err := h.round(topic, payload); err != "" {
			h.fails.Add(1)
			h.mu.Lock()
			if h.failed == "" {
				h.failed = "round " + payload + ": " + err
			}
			h.mu.Unlock()
			if h.lost.Load() {
				return
			}
			continue
		}
		rtt := time.Since(t0)
		h.mu.Lock()
		h.maxRTT = max(h.maxRTT, rtt)
		h.mu.Unlock()
		h.rounds.Add(1)
	}
}

// round publishes payload and waits for it to come back; it returns what went wrong.
func (h *healthy) round(topic, payload string) string {
	tok := h.c.Publish(topic, 1, false, payload)
	deadline := time.After(testenv.Timeout)
	select {
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			return "publish: " + err.Error()
		}
	case <-deadline:
		return "no PUBACK within " + testenv.Timeout.String()
	case <-h.stop:
		return ""
	}
	for {
		select {
		case got := <-h.got:
			if got == payload {
				return ""
			}
		case <-deadline:
			return "message not received within " + testenv.Timeout.String()
		case <-h.stop:
			return ""
		}
	}
}

// check fails the test unless the bystander is still connected, no round failed, and at
// least two further rounds complete from now: the broker served it through the attack.
func (h *healthy) check(t testing.TB) {
	t.Helper()
	n := h.rounds.Load()
	testenv.WaitFor(t, "the healthy client to complete two more rounds (or fail one)", func() bool {
		return h.rounds.Load() >= n+2 || h.fails.Load() > 0 || h.lost.Load()
	})
	h.mu.Lock()
	failed, maxRTT := h.failed, h.maxRTT
	h.mu.Unlock()
	switch {
	case h.lost.Load():
		t.Fatalf("the healthy client lost its connection (%s)", failed)
	case h.fails.Load() > 0:
		t.Fatalf("the healthy client failed %d rounds, the first %s", h.fails.Load(), failed)
	}
	t.Logf("healthy client: %d rounds so far, slowest %v", h.rounds.Load(), maxRTT.Round(time.Millisecond))
}

func wait(t testing.TB, what string, tok mqtt.Token) {
	t.Helper()
	if !tok.WaitTimeout(testenv.Timeout) {
		t.Fatalf("%s: timed out", what)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
