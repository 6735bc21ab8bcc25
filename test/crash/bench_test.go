package crash

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// BenchmarkDurablePublish measures acknowledged QoS 1 publishes per second through the
// broker binary when every message reaches a persistent (offline) session, so that each
// is committed to the store before its PUBACK, under each sync policy: Publishers=4 each
// with Window=64 unacknowledged PUBLISHes (throughput: group commit at work), and one
// publisher waiting for each PUBACK (latency: one commit per message). 64-byte payloads,
// clients in the test process.
//
//	go test -run '^$' -bench DurablePublish -benchtime 20000x ./test/crash
func BenchmarkDurablePublish(b *testing.B) {
	for _, load := range []struct{ pubs, window int }{{4, 64}, {1, 1}} {
		for _, policy := range []string{"always", "interval", "none"} {
			benchDurablePublish(b, policy, load.pubs, load.window)
		}
	}
}

func benchDurablePublish(b *testing.B, policy string, pubs, window int) {
	b.Run(fmt.Sprintf("Sync=%s/Publishers=%d/Window=%d", policy, pubs, window), func(b *testing.B) {
		p := startBroker(b, config(b, filepath.Join(b.TempDir(), "store"), policy), startLimit)
		defer p.stop(b, 30*time.Second)
		sub := newSubscriber("bench-sub", packet.V5, 1)
		c, err := sub.connect(p.addr, true)
		if err != nil {
			b.Fatal(err)
		}
		_ = c.write(&packet.Disconnect{})
		c.close()

		var sent atomic.Int64
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for i := range pubs {
			wg.Go(func() {
				if err := publishN(p.addr, fmt.Sprintf("bench-pub-%d", i), &sent, int64(b.N), window); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	})
}

// publishN publishes QoS 1 messages on crash/q1/<id> with up to window unacknowledged
// until the publishers together have sent total, and waits for every PUBACK.
func publishN(addr, id string, sent *atomic.Int64, total int64, window int) error {
	c, _, err := dial(addr, packet.V311, &packet.Connect{ClientID: []byte(id), CleanStart: true, KeepAlive: 60})
	if err != nil {
		return err
	}
	defer c.close()
	slots := make(chan struct{}, window)
	errc := make(chan error, 1)
	var outstanding sync.WaitGroup
	go func() {
		for {
			p, err := c.read()
			if err != nil {
				errc <- err
				return
			}
			if a, ok := p.(*packet.Ack); ok && a.PacketType == packet.PUBACK {
				<-slots
				outstanding.Done()
			}
		}
	}()
	payload := make([]byte, 64)
	topic := []byte("crash/q1/" + id)
	for n := 0; ; n++ {
		if sent.Add(1) > total {
			break
		}
		select {
		case slots <- struct{}{}:
		case err := <-errc:
			return err
		}
		outstanding.Add(1)
		if err := c.write(&packet.Publish{Topic: topic, Payload: payload, QoS: 1, PacketID: uint16(n%65000 + 1)}); err != nil {
			return err
		}
	}
	done := make(chan struct{})
	go func() { outstanding.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case err := <-errc:
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("%s: PUBACKs missing after a minute", id)
	}
}

// BenchmarkRestart measures how long the broker binary takes from exec to listening on
// a store holding Sessions persistent sessions with Queued messages queued among them
// (each session subscribed to a topic of its own; 100-byte payloads): the restore, and
// the process's RSS once it listens. The state is built once, through the broker, before
// the timer starts; every iteration then stops (SIGTERM) and starts the broker again.
// Building 10K sessions and 100K messages takes a while: it runs only when selected.
//
//	go test -run '^$' -bench Restart -benchtime 5x ./test/crash
func BenchmarkRestart(b *testing.B) {
	const sessions, queued = 10_000, 100_000
	b.Run(fmt.Sprintf("Sessions=%d/Queued=%d", sessions, queued), func(b *testing.B) {
		dir := filepath.Join(b.TempDir(), "store")
		// Built with sync: none (fast); Close makes it durable. Restarted with always.
		p := startBroker(b, config(b, dir, "none"), startLimit)
		if err := fillSessions(p.addr, sessions, queued); err != nil {
			p.kill()
			b.Fatal(err)
		}
		p.stop(b, time.Minute)
		path := config(b, dir, "always")
		var restore, listen time.Duration
		var rss int64
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			p = startBroker(b, path, 5*time.Minute)
			listen += time.Since(start)
			restore += p.restore
			rss = max(rss, vmRSS(p.Cmd.Process.Pid))
			b.StopTimer()
			if !strings.Contains(p.Log(), fmt.Sprintf("sessions=%d queued=%d", sessions, queued)) {
				b.Fatalf("restored something else:\n%s", p.Log())
			}
			p.stop(b, time.Minute)
			b.StartTimer()
		}
		b.ReportMetric(float64(listen.Milliseconds())/float64(b.N), "ms-to-listen")
		b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "ms-restore")
		b.ReportMetric(float64(rss)/(1<<20), "MiB-RSS")
	})
}

// fillSessions creates n persistent sessions, session i subscribed to crash/q1/s<i>, and
// publishes queued messages round robin over their topics while they are offline.
func fillSessions(addr string, n, queued int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	ids := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range ids {
				id := fmt.Sprintf("s%d", i)
				c, _, err := dial(addr, packet.V5, persistentConnect(id, packet.V5))
				if err != nil {
					errs <- err
					return
				}
				_ = c.write(&packet.Subscribe{PacketID: 1, Subscriptions: []packet.Subscription{{Filter: []byte("crash/q1/" + id), QoS: 1}}})
				if _, err := c.read(); err != nil {
					errs <- err
					return
				}
				_ = c.write(&packet.Disconnect{})
				c.close()
			}
		})
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	c, _, err := dial(addr, packet.V311, &packet.Connect{ClientID: []byte("filler"), CleanStart: true, KeepAlive: 60})
	if err != nil {
		return err
	}
	defer c.close()
	payload := make([]byte, 100)
	acks := make(chan error, 1)
	go func() {
		for got := 0; got < queued; {
			p, err := c.read()
			if err != nil {
				acks <- err
				return
			}
			if _, ok := p.(*packet.Ack); ok {
				got++
			}
		}
		acks <- nil
	}()
	for i := range queued {
		topic := []byte("crash/q1/s" + strconv.Itoa(i%n))
		if err := c.write(&packet.Publish{Topic: topic, Payload: payload, QoS: 1, PacketID: uint16(i%65000 + 1)}); err != nil {
			return err
		}
	}
	return <-acks
}

// vmRSS returns a process's resident set in bytes, 0 if unknown.
func vmRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
