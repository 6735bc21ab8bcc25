package testenv

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// given holds the ports FreePort has returned in this test binary.
var given = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// FreePort returns a loopback address ("127.0.0.1:port") that nothing binds now, for TCP
// and, with udp, for UDP too (gossip needs both), for a process the test starts later.
// The port is drawn outside the kernel's ephemeral range: a port from there, free when
// asked, is soon the local end of some outgoing connection (the test's own nodes dial
// each other), and the process that should bind it fails with "address already in use".
// It never returns a port twice in one test binary.
func FreePort(t testing.TB, udp bool) string {
	t.Helper()
	lo, hi := fixedRange()
	given.Lock()
	defer given.Unlock()
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if given.m[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if udp {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				_ = ln.Close()
				continue
			}
			_ = pc.Close()
		}
		_ = ln.Close()
		given.m[port] = true
		return addr
	}
	t.Fatalf("no free loopback port in [%d, %d) (udp %v)", lo, hi, udp)
	return ""
}

// fixedRange is the span of ports FreePort draws from: the largest one of at least 2,000
// ports outside the ephemeral range (Linux's ip_local_port_range, else IANA's 49152-65535),
// above the well-known and commonly configured ones under 10000.
func fixedRange() (lo, hi int) {
	elo, ehi := 49152, 65535
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, err1 := strconv.Atoi(f[0])
			b, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && a <= b {
				elo, ehi = a, b
			}
		}
	}
	below, above := elo-10000, 65535-ehi
	switch {
	case below >= above && below >= 2000:
		return 10000, elo
	case above >= 2000:
		return ehi + 1, 65536
	}
	return 10000, 65536 // the ephemeral range covers nearly everything: no span is safe
}
