package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A Proc is a process a test runs, most often a bifrost binary, with its stderr kept as
// its log: shown when the test fails.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its stderr is read
	mu   sync.Mutex
	log  strings.Builder
}

// StartProc starts cmd and returns once ready has returned true for a line of its
// stderr, failing t if the process exits first or limit passes. ready runs on the
// goroutine that reads stderr, for each line until it returns true, so what it sets
// before is the test's to read once StartProc returns. When the test ends, the process
// is killed if it still runs.
func StartProc(t testing.TB, cmd *exec.Cmd, limit time.Duration, ready func(line string) bool) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if !once && ready(line) {
				once = true
				close(up)
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop(syscall.SIGKILL, Timeout)
		if t.Failed() {
			t.Logf("log of %s:\n%s", cmd.Path, p.Log())
		}
	})
	select {
	case <-up:
		return p
	case <-p.done:
		t.Fatalf("%s exited (%v) before it was ready:\n%s", cmd.Path, cmd.ProcessState, p.Log())
	case <-time.After(limit):
		p.Stop(syscall.SIGKILL, Timeout)
		t.Fatalf("%s not ready after %v:\n%s", cmd.Path, limit, p.Log())
	}
	return nil
}

// Log is what the process wrote to stderr so far.
func (p *Proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop sends sig to the process (by its PID) and waits up to limit for it to exit, then
// kills it. It reports whether the process exited within limit (true when it had already).
func (p *Proc) Stop(sig os.Signal, limit time.Duration) bool {
	select {
	case <-p.done:
		return true
	default:
	}
	_ = p.Cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return true
	case <-time.After(limit):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return false
	}
}

var (
	mqttListenRE = regexp.MustCompile(`msg="mqtt listening" listener=\S+ type=\S+ addr=(\S+)`)
	httpListenRE = regexp.MustCompile(`msg="http listening" addr=(\S+)`)
)

// MQTTAddr returns the address of a bifrost log line that says an MQTT listener listens.
func MQTTAddr(line string) (string, bool) { return submatch(mqttListenRE, line) }

// HTTPAddr returns the address of a bifrost log line that says the HTTP endpoint listens.
func HTTPAddr(line string) (string, bool) { return submatch(httpListenRE, line) }

func submatch(re *regexp.Regexp, line string) (string, bool) {
	if m := re.FindStringSubmatch(line); m != nil {
		return m[1], true
	}
	return "", false
}
