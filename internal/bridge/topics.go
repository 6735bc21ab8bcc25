package bridge

import (
	"strings"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// A route is one topic line of a bridge, with its filters on each side.
type route struct {
	in, out      bool
	qos          uint8
	localPrefix  string
	remotePrefix string
	localFilter  string // localPrefix + pattern: the tap's subscription for out
	remoteFilter string // remotePrefix + pattern: the remote subscription for in
}

func newRoutes(ts []conf.BridgeTopic) []route {
	rs := make([]route, len(ts))
	for i, t := range ts {
		rs[i] = route{
			in:           t.Direction == conf.BridgeIn || t.Direction == conf.BridgeBoth,
			out:          t.Direction == conf.BridgeOut || t.Direction == conf.BridgeBoth,
			qos:          uint8(t.QoS),
			localPrefix:  t.LocalPrefix,
			remotePrefix: t.RemotePrefix,
			localFilter:  t.LocalPrefix + t.Pattern,
			remoteFilter: t.RemotePrefix + t.Pattern,
		}
	}
	return rs
}

// toRemote maps a local topic to its remote name by the first out route that matches it:
// the local prefix is removed and the remote one added, as Mosquitto does.
func toRemote(rs []route, topic string) (string, bool) {
	for i := range rs {
		r := &rs[i]
		if r.out && matches(r.localFilter, topic) {
			return r.remotePrefix + strings.TrimPrefix(topic, r.localPrefix), true
		}
	}
	return "", false
}

// toLocal maps a remote topic to its local name by the first in route that matches it.
func toLocal(rs []route, topic string) (string, bool) {
	for i := range rs {
		r := &rs[i]
		if r.in && matches(r.remoteFilter, topic) {
			return r.localPrefix + strings.TrimPrefix(topic, r.remotePrefix), true
		}
	}
	return "", false
}

// matches reports whether topic matches filter (spec 4.7): + fills one level, # the rest
// including the parent, and wildcards at the first level skip topics starting with $.
func matches(filter, topic string) bool {
	if topic != "" && topic[0] == '$' && filter != "" && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		f, fr, fmore := strings.Cut(filter, "/")
		if f == "#" {
			return true
		}
		t, tr, tmore := strings.Cut(topic, "/")
		if f != "+" && f != t {
			return false
		}
		switch {
		case !fmore && !tmore:
			return true
		case !tmore:
			return fr == "#" // "a/#" matches "a"
		case !fmore:
			return false
		}
		filter, topic = fr, tr
	}
}
