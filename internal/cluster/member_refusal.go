package cluster

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Strangers refused at gossip, counted (bifrost_cluster_refused_total{at="gossip"}) and
// logged at most every refusalLogEvery per stranger, since a stranger retries its join:
//
//   - a node of another cluster, or whose metadata cannot be read: memberlist's alive and
//     merge delegates refuse it by name (member.go, check);
//   - a node without our secret, or with another: memberlist cannot decrypt what it sends
//     and drops it, telling no delegate, only its log. Its lines are read here (as
//     member_suspicion.go reads those of failed probes), by the remote address they name.
//
// memberlist's lines for such a stranger are logged at debug level only: the warning
// below, rate-limited, says it once.

const (
	// refusalLogEvery bounds the refusal log per stranger.
	refusalLogEvery = 30 * time.Second
	// maxRefusedKept bounds the strangers whose last log time is kept: beyond it (many
	// addresses at once) a refusal is counted without a log line.
	maxRefusedKept = 1024
)

// memberlist v0.7.0's lines (after "[ERR] memberlist: ") for gossip it could not decrypt:
// a packet (net.go ingestPacket) or a stream (net.go handleConn, readStream), each ending
// with " from=<address>". TestRefuseWrongKey fails if a new version changes them.
const (
	undecryptedPacket = "Decrypt packet failed: "
	undecryptedStream = "failed to receive: "
	fromMark          = " from="
)

// undecryptable are memberlist's reasons (security.go, net.go) for a stream it could not
// decrypt; a stream that failed otherwise (a timeout, a reset) is no stranger's.
var undecryptable = []string{
	"no installed keys could decrypt the message",
	"encryption is configured but remote state is not encrypted",
	"remote state is encrypted and encryption is not configured",
	"unsupported encryption version",
	"payload is too small to decrypt",
	"cannot decrypt empty payload",
}

// refusals counts refused strangers and when each was last logged; guarded by its mu.
type refusals struct {
	mu     sync.Mutex
	count  uint64
	logged map[string]time.Time // by "node NAME" or "addr HOST"
}

// note counts a refusal of the stranger known by key and reports whether to log it now.
func (r *refusals) note(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	if last, ok := r.logged[key]; ok && now.Sub(last) < refusalLogEvery {
		return false
	}
	if r.logged == nil {
		r.logged = map[string]time.Time{}
	}
	if len(r.logged) >= maxRefusedKept {
		for k, at := range r.logged {
			if now.Sub(at) >= refusalLogEvery {
				delete(r.logged, k)
			}
		}
		if len(r.logged) >= maxRefusedKept {
			return false
		}
	}
	r.logged[key] = now
	return true
}

func (r *refusals) total() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// refuse counts and logs the refusal of n (the delegates'), and returns the error that
// refuses it.
func (m *membership) refuse(n *memberlist.Node, err error) error {
	if m.refused.note("node "+n.Name, time.Now()) {
		m.log.Warn("cluster: refused a node", "node", n.Name, "addr", n.Address(), "reason", err)
	}
	return fmt.Errorf("cluster: node %s refused: %w", n.Name, err)
}

// refusalCount returns how many times a stranger was refused at gossip.
func (m *membership) refusalCount() uint64 { return m.refused.total() }

// noteUndecrypted reads a memberlist log line: gossip it could not decrypt is a stranger
// refused, counted and logged. It reports whether the line was one.
func (m *membership) noteUndecrypted(line string) bool {
	rest, ok := strings.CutPrefix(line, undecryptedPacket)
	if !ok {
		if rest, ok = strings.CutPrefix(line, undecryptedStream); !ok {
			return false
		}
		if !hasAnyPrefix(rest, undecryptable) {
			return false
		}
	}
	i := strings.LastIndex(rest, fromMark)
	if i < 0 {
		return false
	}
	reason, from := rest[:i], rest[i+len(fromMark):]
	host := from
	if h, _, err := splitHostPort(from); err == nil {
		host = h
	}
	if m.refused.note("addr "+host, time.Now()) {
		m.log.Warn("cluster: refused a node", "addr", from,
			"reason", "its gossip could not be decrypted (is cluster.secret the same on both nodes?): "+reason)
	}
	return true
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
