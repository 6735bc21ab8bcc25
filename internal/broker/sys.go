package broker

import (
	"context"
	"runtime"
	"strconv"
	"time"
)

// Version is reported in $SYS/broker/version; the binary sets it.
var Version = "dev"

// startSys publishes the $SYS topics Mosquitto publishes, retained, every interval
// (sys_interval), until the broker closes.
// Reconfigure stops it (stopSys) and starts it again at a new interval.
func (b *Broker) startSys(interval time.Duration) {
	stop := make(chan struct{})
	b.live.sysStop = stop
	b.goRoutine("sys", func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		b.publishSys()
		for {
			select {
			case <-ctx.Done():
				return
			case <-b.stopped():
				return
			case <-stop:
				return
			case <-t.C:
				b.publishSys()
			}
		}
	})
}

// stopSys ends the $SYS goroutine, if it runs.
func (b *Broker) stopSys() {
	if b.live.sysStop != nil {
		close(b.live.sysStop)
		b.live.sysStop = nil
	}
}

// stopped is closed when Close begins.
func (b *Broker) stopped() <-chan struct{} { return b.done }

// publishSys publishes one round of $SYS figures.
func (b *Broker) publishSys() {
	st := &b.stats
	f := b.Figures()
	var dropped uint64
	for i := range st.dropped {
		dropped += st.dropped[i].Load()
	}
	figures := [...]struct {
		topic string
		value string
	}{
		{"$SYS/broker/version", "bifrost " + Version + " (" + runtime.Version() + ")"},
		{"$SYS/broker/uptime", strconv.FormatInt(int64(time.Since(b.start)/time.Second), 10) + " seconds"},
		{"$SYS/broker/clients/connected", strconv.FormatUint(f.ClientsConnected, 10)},
		{"$SYS/broker/clients/disconnected", strconv.FormatUint(f.ClientsTotal-f.ClientsConnected, 10)},
		{"$SYS/broker/clients/total", strconv.FormatUint(f.ClientsTotal, 10)},
		{"$SYS/broker/connections/total", strconv.FormatUint(st.connects.Load(), 10)},
		{"$SYS/broker/messages/received", strconv.FormatUint(f.Received, 10)},
		{"$SYS/broker/messages/sent", strconv.FormatUint(f.Sent, 10)},
		{"$SYS/broker/publish/messages/dropped", strconv.FormatUint(dropped, 10)},
		{"$SYS/broker/bytes/received", strconv.FormatUint(st.bytesRecv.Load(), 10)},
		{"$SYS/broker/bytes/sent", strconv.FormatUint(st.bytesSent.Load(), 10)},
		{"$SYS/broker/subscriptions/count", strconv.FormatInt(st.subs.Load(), 10)},
		{"$SYS/broker/retained messages/count", strconv.FormatUint(f.Retained, 10)},
	}
	for _, f := range figures {
		_ = b.Publish(f.topic, []byte(f.value), 0, true)
	}
}
