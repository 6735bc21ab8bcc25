package loadgen

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/bifrost-mqtt/bifrost/internal/packet"
)

// Usage describes `bifrost-bench`.
const Usage = `usage: bifrost-bench MODE [flags]

modes:
  conns    open -n idle connections; with -pid, the broker's RSS and PSS per connection
  fanin    -pubs publishers -> -subs subscribers (default 1), one topic
  fanout   1 publisher -> -subs subscribers, one topic
  pair     -pairs publisher/subscriber pairs, a topic each
  churn    -concurrency clients connect and disconnect as fast as they can for -duration;
           with -pid and -metrics, the broker's RSS and goroutines before, at peak and
           after -settle

common flags:
  -addr IP:PORT     broker address, on loopback (default 127.0.0.1:1883)
  -version V        MQTT version: 3.1.1 or 5.0 (default 3.1.1)
  -pid PID          the broker's process id: report its memory and CPU from /proc
  -metrics URL      a bifrost broker's HTTP address (http://127.0.0.1:8080): also report its
                    live heap per connection (GC forced through /debug/pprof, then /metrics);
                    with fanin/fanout/pair, its GC cycles and GC CPU share over the run
  -src-addrs N      spread connections over source addresses 127.0.0.2.. (default 4; 0: none)
  -ws PATH          MQTT over WebSocket to ws://ADDR/PATH (e.g. /mqtt) instead of plain TCP
  -qos Q            QoS of PUBLISHes and subscriptions: 0, 1 or 2 (default 0)
  -concurrency N    connections being opened at once (default 64)
  -timeout D        bound on the whole run, the wait for the last deliveries included: at
                    -duration or under, what is still on its way counts as lost, and the
                    run says so (default 10m)
  -json-only        print only the final JSON line

conns flags:
  -n N              connections (default 1000)
  -subscribe        one subscription each, to a topic of its own, at -qos
  -settle D         idle time before measuring (default 5s)
  -hold D           time to keep the connections open, at least -settle
  -per-proc N       connections per process at most; more run in worker processes (default 9000)
  -keepalive S      CONNECT keep alive in seconds, pinged at half of it (default 0: none)

fanin, fanout, pair flags:
  -pub-addr IP:PORT the publishers' broker address, another node of a cluster (default -addr)
  -pubs P / -subs S / -pairs K   (default 10 each; fanin -subs: 1)
  -size B           payload bytes, at least 16 (default 64)
  -rate R           messages per second per publisher; 0: as fast as the window allows (default 0)
  -inflight W       window per publisher: unacknowledged (QoS 1/2) and, with -rate 0,
                    not yet delivered messages (default 32)
  -duration D       sending time (default 10s unless -count is set)
  -count N          messages per publisher at most
  -recv-max N       Receive Maximum of 5.0 subscribers (default: not sent)
  -session-expiry S persistent subscriber sessions, so the broker stores their messages:
                    3.1.1 clean session 0, 5.0 Session Expiry Interval S seconds (default 0:
                    clean sessions); they outlive the run

The output is a few lines for people, then one JSON line with every figure and parameter.
`

// Main runs `bifrost-bench` with args, the arguments after the command name, and returns
// the exit code: 0 success, 1 failure, 2 misuse. self are the arguments that, given to
// this executable, lead back to Main (none for bifrost-bench): worker processes are
// started with them.
func Main(args []string, stdout, stderr io.Writer, self []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(stderr, Usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	o := &Options{Mode: args[0]}
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		version  = fs.String("version", "3.1.1", "")
		qos      = fs.Uint("qos", 0, "")
		jsonOnly = fs.Bool("json-only", false, "")
		worker   = fs.Bool("worker", false, "") // hidden: this is a worker process
		w        workerOptions
	)
	fs.StringVar(&o.Addr, "addr", "127.0.0.1:1883", "")
	fs.StringVar(&o.PubAddr, "pub-addr", "", "")
	fs.IntVar(&o.PID, "pid", 0, "")
	fs.StringVar(&o.Metrics, "metrics", "", "")
	fs.IntVar(&o.SrcAddrs, "src-addrs", 4, "")
	fs.StringVar(&o.WSPath, "ws", "", "")
	fs.IntVar(&o.Concurrency, "concurrency", 64, "")
	fs.DurationVar(&o.Timeout, "timeout", 0, "")
	fs.IntVar(&o.Conns, "n", 1000, "")
	fs.BoolVar(&o.Subscribe, "subscribe", false, "")
	fs.DurationVar(&o.Settle, "settle", 0, "")
	fs.DurationVar(&o.Hold, "hold", 0, "")
	fs.IntVar(&o.PerProcess, "per-proc", 9000, "")
	fs.IntVar(&o.KeepAlive, "keepalive", 0, "")
	fs.IntVar(&o.Publishers, "pubs", 10, "")
	fs.IntVar(&o.Subscribers, "subs", 0, "") // 0: the mode's default (EnsureDefaults)
	fs.IntVar(&o.Pairs, "pairs", 10, "")
	fs.IntVar(&o.Size, "size", 64, "")
	fs.Float64Var(&o.Rate, "rate", 0, "")
	fs.IntVar(&o.Inflight, "inflight", 32, "")
	fs.DurationVar(&o.Duration, "duration", 0, "")
	fs.IntVar(&o.Count, "count", 0, "")
	fs.IntVar(&o.RecvMax, "recv-max", 0, "")
	fs.IntVar(&o.SessionExpiry, "session-expiry", 0, "")
	fs.StringVar(&w.run, "worker-run", "", "")
	fs.IntVar(&w.offset, "worker-offset", 0, "")
	fs.DurationVar(&w.deadline, "worker-deadline", 0, "")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, Usage)
			return 0
		}
		fmt.Fprintf(stderr, "bifrost-bench: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bifrost-bench: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	v, err := parseVersion(*version)
	if err != nil {
		fmt.Fprintf(stderr, "bifrost-bench: %v\n", err)
		return 2
	}
	o.Version, o.QoS = v, byte(min(*qos, 255))
	if o.SrcAddrs == 0 {
		o.SrcAddrs = -1 // 0 on the command line means none, as -1 does
	}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "bifrost-bench: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *worker {
		if o.Mode != ModeConns || w.run == "" || w.deadline <= 0 {
			fmt.Fprintln(stderr, "bifrost-bench: -worker is for conns runs started by bifrost-bench itself")
			return 2
		}
		return runWorker(ctx, o, w, os.Stdin, stdout)
	}
	if !*jsonOnly {
		o.Log = stdout
	}
	r, err := Run(ctx, o, self)
	if err != nil {
		fmt.Fprintf(stderr, "bifrost-bench: %v\n", err)
		return 1
	}
	if !*jsonOnly {
		r.writeText(stdout)
	}
	if err := r.writeJSON(stdout); err != nil {
		fmt.Fprintf(stderr, "bifrost-bench: %v\n", err)
		return 1
	}
	return 0
}

// parseVersion accepts the version names people write.
func parseVersion(s string) (packet.Version, error) {
	switch s {
	case "3.1.1", "311", "4":
		return packet.V311, nil
	case "5.0", "5":
		return packet.V5, nil
	}
	return 0, fmt.Errorf("version %q: want 3.1.1 or 5.0", s)
}

// Run runs the benchmark o describes, with defaults filled in and validated, and returns
// its report; Options.Timeout bounds it. self is as for Main; a conns run needs it only
// when it starts worker processes.
func Run(ctx context.Context, o *Options, self []string) (*Report, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	errs := &errorLog{}
	cpu0, _ := Process{Dir: "/proc/self"}.CPU()
	var (
		r   *Report
		err error
	)
	switch o.Mode {
	case ModeConns:
		r, err = runConns(ctx, o, self, errs)
	case ModeChurn:
		r, err = runChurn(ctx, o, errs)
	default:
		r, err = runTraffic(ctx, o, errs)
	}
	if err != nil {
		return nil, err
	}
	cpu1, _ := Process{Dir: "/proc/self"}.CPU()
	r.ToolCPU += (cpu1 - cpu0).Seconds()
	r.Params = o.params()
	r.Errors = errs.lines()
	return r, nil
}
