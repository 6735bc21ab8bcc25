//go:build !linux

package listener

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/lesismal/nbio"
)

// awaitPollers returns once every poller goroutine of the engine runs its loop.
//
// Why: an nbio (v1.6.12) poller clears its shutdown flag when its loop starts, so an
// Engine.Stop that comes before that is lost: the poller never exits, spinning on its
// wake-up descriptor, and Stop waits for it forever. A Server closed right after its
// first Listen (a broker whose second listener fails to bind) would hang. So start waits
// until each poller has delivered one byte from a socket pair added to it; nbio picks a
// connection's poller by descriptor modulo the number of pollers, so pairs are made until
// every poller has one.
func (s *Server) awaitPollers() error {
	n := s.o.Pollers
	ready := make(chan int, n)
	covered := make([]bool, n)
	var probes []*nbio.Conn
	var peers []int
	defer func() {
		for _, nc := range probes {
			_ = nc.Close()
		}
		for _, fd := range peers {
			_ = syscall.Close(fd)
		}
	}()
	left, collisions := n, 0
	for tries := 0; left > 0; tries++ {
		if tries > 4*n+16 {
			return errors.New("listener: cannot reach every poller")
		}
		nc, peer, err := socketPair()
		if err != nil {
			return fmt.Errorf("listener: probing the pollers: %w", err)
		}
		probes, peers = append(probes, nc), append(peers, peer)
		i := nc.Hash() % n
		if covered[i] {
			// Everything stays open until the end, so the next pair gets higher descriptors;
			// a growing number of spare ones shifts it to other pollers.
			collisions++
			for range collisions {
				fd, err := dupCloexec(peer)
				if err != nil {
					return fmt.Errorf("listener: probing the pollers: %w", err)
				}
				peers = append(peers, fd)
			}
			continue
		}
		covered[i] = true
		left--
		nc.SetSession(pollerProbe{i: i, ready: ready})
		if _, err := s.engine.AddConn(nc); err != nil {
			return fmt.Errorf("listener: probing the pollers: %w", err)
		}
		if _, err := syscall.Write(peer, []byte{0}); err != nil {
			return fmt.Errorf("listener: probing the pollers: %w", err)
		}
	}
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-ready:
		case <-timeout:
			return errors.New("listener: the pollers did not start")
		}
	}
	return nil
}

// A pollerProbe is the session of a probe connection: its byte arrived, so its poller runs.
type pollerProbe struct {
	i     int
	ready chan<- int
}

// socketPair returns one end of a new Unix socket pair as an nbio conn (not yet polled)
// and the other end's descriptor.
func socketPair() (*nbio.Conn, int, error) {
	// Close-on-exec from the start, as every descriptor of ours: see takeOver.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fds[0]), "probe")
	c, err := net.FileConn(f) // a duplicate
	_ = f.Close()
	if err != nil {
		_ = syscall.Close(fds[1])
		return nil, 0, err
	}
	nc, err := takeOver(c) // another duplicate; c is closed
	if err != nil {
		_ = syscall.Close(fds[1])
		return nil, 0, err
	}
	return nc, fds[1], nil
}

// dupCloexec duplicates fd, close-on-exec (see takeOver).
func dupCloexec(fd int) (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	nfd, err := syscall.Dup(fd)
	if err == nil {
		syscall.CloseOnExec(nfd)
	}
	return nfd, err
}
