package cluster

import (
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Suspicion: SWIM marks a member that misses a probe suspect before it declares it dead
// (a few seconds later, unless the member refutes it). memberlist keeps that state to
// itself: no delegate is told, and the Node values it hands out keep their first State.
// Operators want to see it (/load, /cluster), so membership keeps its own: a member is
// suspect from the moment this node's probe of it failed (memberlist logs exactly then,
// and the log writer passes the line here, noteLog) until it answers a probe (the ping delegate),
// an alive message about it arrives (its refutation), or it is declared dead.
// Suspicions other nodes gossip are not seen.

// suspectLine is memberlist's log line (v0.7.0, state.go probeNode) for a failed probe,
// after its "[INFO] memberlist: " prefix; TestSuspicion fails if a new version changes it.
const (
	suspectPrefix = "Suspect "
	suspectSuffix = " has failed, no acks received"
)

// noteSuspect reads memberlist's log lines for failed probes.
func (m *membership) noteSuspect(line string) {
	rest, ok := strings.CutPrefix(line, suspectPrefix)
	if !ok {
		return
	}
	name, ok := strings.CutSuffix(rest, suspectSuffix)
	if !ok {
		return
	}
	m.mu.Lock()
	_, live := m.live[name]
	if live {
		m.suspect[name] = true
	}
	m.mu.Unlock()
	if live {
		m.signal()
	}
}

// clearSuspect ends a suspicion of name, if any.
func (m *membership) clearSuspect(name string) {
	m.mu.Lock()
	was := m.suspect[name]
	delete(m.suspect, name)
	m.mu.Unlock()
	if was {
		m.signal()
	}
}

// AckPayload is the ping delegate's: nothing is added to this node's acks.
func (m *membership) AckPayload() []byte { return nil }

// NotifyPingComplete is the ping delegate's: other answered a probe.
func (m *membership) NotifyPingComplete(other *memberlist.Node, _ time.Duration, _ []byte) {
	m.clearSuspect(other.Name)
}
