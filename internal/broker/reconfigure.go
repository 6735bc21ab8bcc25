package broker

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/listener"
	"github.com/bifrost-mqtt/bifrost/internal/packet"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// liveConfig is the configuration in force. mu serializes Reconfigure and, after Start,
// guards cfg and sysStop. limits and set are immutable snapshots that Reconfigure swaps
// and connections load without a lock. lim is what every settings snapshot shares (the
// counters, the sweeper and, once Restore ran, the journal); New and Restore set it.
type liveConfig struct {
	mu      sync.Mutex
	cfg     *conf.Config
	sysStop chan struct{}            // closed to end the $SYS goroutine (sys.go); nil: none runs
	limits  atomic.Pointer[limits]   // limits.go
	set     atomic.Pointer[settings] // the mqtt and queue sections (settings.go)
	lim     session.Limits
}

// Reconfigure puts the live sections of next in force on the running broker:
//
//   - limits: one snapshot swapped atomically, the count of open connections carried
//     over; from the next CONNECT, SUBSCRIBE or PUBLISH of every connection.
//   - queue.when_full and max_pause: at the next PUBLISH; publishers held back by full
//     queues are read again when backpressure is turned off.
//   - mqtt and queue bounds, use_identity_as_username: for connections accepted from
//     now on (what a CONNACK states stays true for its connection), and the sessions
//     they create or resume; mqtt.connect_timeout for connections accepted from now on.
//   - sys_interval: the $SYS goroutine is restarted.
//   - listeners, matched by name: a removed one stops accepting and its clients are
//     disconnected (MQTT 5: DISCONNECT 0x8B, server shutting down, as at Close); one whose
//     type, address or path changed is removed and opened again; one whose tls block
//     changed loads the new files, its connections untouched; one added opens.
//
// next is validated with its defaults filled, and differs from the running configuration
// only where conf.Config.Applied lets it: which listeners have their own auth block is
// fixed. What fails to open is reported; the rest is applied.
func (b *Broker) Reconfigure(next *conf.Config) error {
	b.live.mu.Lock()
	defer b.live.mu.Unlock()
	cur := b.live.cfg
	prev := b.live.limits.Load()
	b.live.limits.Store(newLimits(next, prev.open, prev))
	if prev.backpressure && next.Queue.WhenFull != conf.QueueBackpressure {
		b.releaseHeld() // what finds a full queue is dropped from now on
	}
	b.live.set.Store(newSettings(next, &b.live.lim))
	b.net.SetConnectTimeout(time.Duration(next.MQTT.ConnectTimeout))
	if !reflect.DeepEqual(cur.SysInterval, next.SysInterval) {
		b.stopSys()
		if iv := next.SysInterval; iv != nil && *iv > 0 {
			b.startSys(time.Duration(*iv))
		}
	}
	err := b.reconfigureListeners(cur.Listeners, next.Listeners)
	b.live.cfg = next
	return err
}

// reconfigureListeners closes the listeners gone from next, reopens those whose endpoint
// changed, reloads the certificates of those whose tls block changed, and opens those
// new in next, in that order, so that an address freed by one may be taken by another.
func (b *Broker) reconfigureListeners(cur, next []conf.Listener) error {
	old := make(map[string]conf.Listener, len(cur))
	for _, l := range cur {
		old[l.Name] = l
	}
	var errs []error
	var open []conf.Listener
	for _, l := range next {
		o, ok := old[l.Name]
		delete(old, l.Name)
		switch {
		case !ok:
			open = append(open, l)
		case o.Type != l.Type || o.Address != l.Address || o.Path != l.Path || (o.TLS == nil) != (l.TLS == nil):
			b.closeListener(l.Name)
			open = append(open, l)
		case l.TLS != nil && (o.TLS.CertFile != l.TLS.CertFile || o.TLS.KeyFile != l.TLS.KeyFile ||
			o.TLS.ClientCAFile != l.TLS.ClientCAFile || o.TLS.MinVersion != l.TLS.MinVersion):
			if ln := b.listener(l.Name); ln != nil {
				if err := ln.SetTLS(*l.TLS); err != nil {
					errs = append(errs, fmt.Errorf("listener %s: %w", l.Name, err))
				} else {
					b.log.Info("mqtt listener TLS files in force", "listener", l.Name)
				}
			}
		}
	}
	for name := range old {
		b.closeListener(name)
	}
	for _, lc := range open {
		l, err := b.net.Listen(lc)
		if err != nil {
			errs = append(errs, fmt.Errorf("listener %s (%s %s): %w", lc.Name, lc.Type, lc.Address, err))
			continue
		}
		b.mu.Lock()
		b.listeners = append(b.listeners, l)
		b.mu.Unlock()
		b.log.Info("mqtt listening", "listener", l.Name(), "type", l.Type(), "addr", l.Addr().String())
	}
	return errors.Join(errs...)
}

// listener returns the open listener called name, or nil.
func (b *Broker) listener(name string) *listener.Listener {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.listeners {
		if l.Name() == name {
			return l
		}
	}
	return nil
}

// closeListener stops the listener called name accepting, disconnects its clients as Close
// does (MQTT 5: DISCONNECT 0x8B, server shutting down: the client is told the endpoint
// went away on purpose and reconnects elsewhere or later, as it would to a restart; 0x9C,
// use another server, would want a Server Reference to name one), and closes it.
func (b *Broker) closeListener(name string) {
	b.mu.Lock()
	var l *listener.Listener
	for i, x := range b.listeners {
		if x.Name() == name {
			l = x
			b.listeners = append(b.listeners[:i:i], b.listeners[i+1:]...)
			break
		}
	}
	var on []*session.Session
	if l != nil {
		for _, s := range b.sessions.m {
			if c, ok := s.Conn().(listener.Conn); ok && c.Listener() == l {
				on = append(on, s)
			}
		}
	}
	b.mu.Unlock()
	if l == nil {
		return
	}
	for _, s := range on {
		s.Disconnect(packet.ServerShuttingDown)
	}
	if err := l.Close(); err != nil {
		b.log.Warn("mqtt listener close", "listener", name, "err", err)
	}
	b.log.Info("mqtt listener closed", "listener", name, "clients_disconnected", len(on))
}
