package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// Worker processes. A conns run past one process's share re-executes this binary with the
// self arguments, which lead back to Main, and `conns -worker ...` (for bifrost-bench:
// `bifrost-bench conns -worker ...`), one process per share.
// A worker talks to its parent in JSON lines on stdout:
//
//	{"connected":9000,"failed":0,"start_unix_ns":...,"end_unix_ns":...}   once connected
//	{"closed":true,"cpu_s":1.23}                                          after closing
//
// It closes its connections and exits when its stdin ends (the parent closes it, or dies),
// on SIGINT or SIGTERM, or at its deadline, whichever comes first; the parent kills one
// that has not exited closeWait after being told.

// workerReport is one line a worker writes.
type workerReport struct {
	Connected int      `json:"connected"`
	Failed    int      `json:"failed"`
	Start     int64    `json:"start_unix_ns,omitempty"`
	End       int64    `json:"end_unix_ns,omitempty"`
	Errors    []string `json:"errors,omitempty"`
	Closed    bool     `json:"closed,omitempty"`
	CPUS      float64  `json:"cpu_s,omitempty"`
}

// workerOptions are the options only a worker has, set by its parent.
type workerOptions struct {
	run      string
	offset   int
	deadline time.Duration // from the worker's start
}

// runWorker is the worker's side: open the share, report, hold, close, report.
func runWorker(ctx context.Context, o *Options, w workerOptions, stdin io.Reader, stdout io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, w.deadline)
	defer cancel()
	enc := json.NewEncoder(stdout)
	errs := &errorLog{}
	if _, err := raiseOpenFiles(); err != nil {
		errs.add("rlimit", err)
	}
	g, err := openGroup(ctx, o, groupSpec{run: w.run, offset: w.offset, n: o.Conns, concurrency: o.Concurrency}, errs)
	if g == nil {
		_ = enc.Encode(workerReport{Failed: o.Conns, Errors: []string{err.Error()}})
		return 1
	}
	if err != nil {
		errs.add("connect", err)
	}
	_ = enc.Encode(workerReport{Connected: g.connected, Failed: g.failed, Start: g.start.UnixNano(),
		End: g.end.UnixNano(), Errors: errs.lines()})

	go func() { // stdin ends when the parent closes it or exits
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	stop := make(chan struct{})
	go g.keepAlive(time.Duration(o.KeepAlive)*time.Second, stop)
	<-ctx.Done()
	close(stop)
	g.close()
	cpu, _ := Process{Dir: "/proc/self"}.CPU()
	_ = enc.Encode(workerReport{Closed: true, CPUS: cpu.Seconds()})
	return 0
}

// workers are the worker processes of a conns run, as the parent sees them.
type workers struct {
	procs []*workerProc
	errs  *errorLog
	first []workerReport
}

type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan workerReport // closed when stdout ends
}

// startWorkers starts procs workers sharing o.Conns connections, perProc at most each,
// and waits until each has reported its connections. On error it stops those started.
func startWorkers(ctx context.Context, o *Options, self []string, run string, procs, perProc int, errs *errorLog) (*workers, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("loadgen: worker processes: %w", err)
	}
	ws := &workers{errs: errs}
	// A worker outlives its parent's plan by a margin at most: connecting is bounded by
	// the handshake timeout per connection.
	deadline := o.Timeout
	for k := range procs {
		offset := k * perProc
		n := min(perProc, o.Conns-offset)
		args := append(append([]string(nil), self...), ModeConns, "-worker",
			"-worker-run", run, "-worker-offset", strconv.Itoa(offset), "-worker-deadline", deadline.String(),
			"-addr", o.Addr, "-version", o.Version.String(), "-n", strconv.Itoa(n),
			"-per-proc", strconv.Itoa(perProc), "-src-addrs", strconv.Itoa(o.SrcAddrs), "-ws", o.WSPath,
			"-concurrency", strconv.Itoa(max(1, (o.Concurrency+procs-1)/procs)),
			"-keepalive", strconv.Itoa(o.KeepAlive), "-qos", strconv.Itoa(int(o.QoS)),
			"-subscribe="+strconv.FormatBool(o.Subscribe))
		cmd := exec.Command(exe, args...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			ws.release()
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			ws.release()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			ws.release()
			return nil, fmt.Errorf("loadgen: worker process: %w", err)
		}
		wp := &workerProc{cmd: cmd, stdin: stdin, lines: make(chan workerReport, 2)}
		go wp.read(stdout, errs)
		ws.procs = append(ws.procs, wp)
	}
	for i, wp := range ws.procs {
		select {
		case r, ok := <-wp.lines:
			if !ok {
				ws.release()
				return nil, fmt.Errorf("loadgen: worker %d (pid %d) exited before reporting", i, wp.cmd.Process.Pid)
			}
			for _, e := range r.Errors {
				errs.add(fmt.Sprintf("worker %d", i), errors.New(e))
			}
			ws.first = append(ws.first, r)
		case <-ctx.Done():
			ws.release()
			return nil, ctx.Err()
		}
	}
	return ws, nil
}

// read decodes the worker's report lines until its stdout ends.
func (wp *workerProc) read(stdout io.Reader, errs *errorLog) {
	defer close(wp.lines)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var r workerReport
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			errs.add("worker output", fmt.Errorf("%w: %q", err, sc.Text()))
			continue
		}
		wp.lines <- r
	}
}

func (ws *workers) result() (connected, failed int, start, end time.Time) {
	for _, r := range ws.first {
		connected += r.Connected
		failed += r.Failed
		s, e := time.Unix(0, r.Start), time.Unix(0, r.End)
		if start.IsZero() || s.Before(start) {
			start = s
		}
		if e.After(end) {
			end = e
		}
	}
	return connected, failed, start, end
}

// release tells every worker to close, waits for their last reports (closeWait plus the
// time closing takes), and kills, by pid, any worker still running after that.
func (ws *workers) release() float64 {
	for _, wp := range ws.procs {
		wp.stdin.Close()
	}
	var cpu float64
	timeout := time.After(closeWait + 30*time.Second)
	for i, wp := range ws.procs {
		exited := false
	wait:
		for {
			select {
			case r, ok := <-wp.lines:
				if !ok {
					exited = true
					break wait
				}
				cpu += r.CPUS
			case <-timeout:
				break wait
			}
		}
		if !exited {
			ws.errs.add("worker", fmt.Errorf("worker %d (pid %d) did not exit: killed", i, wp.cmd.Process.Pid))
			_ = wp.cmd.Process.Kill()
		}
		if err := wp.cmd.Wait(); err != nil && exited {
			ws.errs.add("worker", fmt.Errorf("worker %d: %w", i, err))
		}
	}
	ws.procs = nil
	return cpu
}
