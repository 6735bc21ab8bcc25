package loadgen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

const (
	// awaitIdle ends the wait for deliveries after the last PUBLISH when none has arrived
	// for that long; awaitMax ends it in any case.
	awaitIdle = 2 * time.Second
	awaitMax  = 30 * time.Second
	// closeWait bounds the wait for the broker to close each connection after DISCONNECT.
	closeWait = 5 * time.Second
)

// runTraffic runs fanin, fanout or pair: it connects the subscribers, then the
// publishers, lets them all send at once, waits for the deliveries still due, and reports.
func runTraffic(ctx context.Context, o *Options, errs *errorLog) (*Report, error) {
	d, err := newDialer(o.Addr, o.SrcAddrs, o.WSPath)
	if err != nil {
		return nil, err
	}
	pd := d // the publishers' broker: another node with -pub-addr
	if o.PubAddr != "" {
		if pd, err = newDialer(o.PubAddr, o.SrcAddrs, o.WSPath); err != nil {
			return nil, err
		}
	}
	run := runID()
	nPubs, nSubs := o.topology()
	topic := func(i int) string { return fmt.Sprintf("lg/%s/%s", run, o.Mode) }
	if o.Mode == ModePair {
		topic = func(i int) string { return fmt.Sprintf("lg/%s/pair/%d", run, i) }
	}
	subsPerMsg := nSubs // fanin and fanout: every subscriber has the one topic
	if o.Mode == ModePair {
		subsPerMsg = 1
	}

	// Connections are opened a few at a time; every one is closed on the way out.
	pubClients := make([]*client, nPubs)
	subClients := make([]*client, nSubs)
	defer func() {
		closeAll(append(append([]*client(nil), pubClients...), subClients...))
	}()
	err = parallel(ctx, nSubs, min(o.Concurrency, nSubs), func(i int) error {
		c, err := dialConnect(ctx, d, i, connectOptions{version: o.Version,
			clientID: fmt.Sprintf("lg-%s-s%d", run, i), recvMax: uint16(o.RecvMax), expiry: uint32(o.SessionExpiry)})
		if err != nil {
			return err
		}
		subClients[i] = c
		return c.subscribe(topic(i), o.QoS)
	})
	if err != nil {
		return nil, fmt.Errorf("loadgen: subscriber: %w", err)
	}
	err = parallel(ctx, nPubs, min(o.Concurrency, nPubs), func(i int) error {
		c, err := dialConnect(ctx, pd, nSubs+i, connectOptions{version: o.Version,
			clientID: fmt.Sprintf("lg-%s-p%d", run, i)})
		pubClients[i] = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("loadgen: publisher: %w", err)
	}
	if o.PubAddr != "" {
		fmt.Fprintf(o.Log, "%s: %d publisher(s) connected to %s, %d subscriber(s) to %s\n", o.Mode, nPubs, o.PubAddr, nSubs, o.Addr)
	} else {
		fmt.Fprintf(o.Log, "%s: %d publisher(s) and %d subscriber(s) connected to %s\n", o.Mode, nPubs, nSubs, o.Addr)
	}

	pubs := make([]*publisher, nPubs)
	for i, c := range pubClients {
		pubs[i] = newPublisher(c, i, topic(i), o.QoS, o.Size, subsPerMsg)
	}
	subs := make([]*subscriber, nSubs)
	for i, c := range subClients {
		if o.Mode == ModePair {
			subs[i] = newSubscriber(c, pubs, i, 1, 0)
		} else {
			subs[i] = newSubscriber(c, pubs, 0, nPubs, i)
		}
	}

	var readers sync.WaitGroup
	for _, s := range subs {
		readers.Go(func() {
			if err := s.recvLoop(); err != nil {
				errs.add("subscriber", err)
			}
		})
	}
	for _, p := range pubs {
		readers.Go(func() {
			if err := p.ackLoop(); err != nil {
				errs.add("publisher acks", err)
			}
		})
	}

	probe := newBrokerProbe(o.PID, errs)
	probe.start()
	var gcBefore [len(gcMetrics)]float64
	gcStart := time.Now()
	if o.Metrics != "" {
		if gcBefore, err = gcSample(ctx, o.Metrics); err != nil {
			return nil, err
		}
	}
	start := now()
	pc := pace{count: int64(o.Count), rate: o.Rate, window: o.Inflight, deadline: time.Now().Add(o.Timeout)}
	if o.Duration > 0 {
		pc.deadline = time.Now().Add(min(o.Duration, o.Timeout))
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			close(stop)
		case <-stop:
		}
	}()
	var writers sync.WaitGroup
	for _, p := range pubs {
		writers.Go(func() {
			if err := p.run(pc, stop); err != nil {
				errs.add("publisher", err)
			}
		})
	}
	writers.Wait()
	if !awaitDeliveries(ctx, pubs, subs, o.QoS > 0) {
		errs.add("timeout", errCutShort)
	}
	usage := probe.stop()
	if o.Metrics != "" {
		after, err := gcSample(ctx, o.Metrics)
		if err != nil {
			errs.add("broker", err)
		} else {
			if usage == nil {
				usage = &BrokerUsage{}
			}
			g := &GCUsage{Cycles: after[0] - gcBefore[0], CPUS: after[1] - gcBefore[1]}
			g.PerS = g.Cycles / time.Since(gcStart).Seconds()
			if total := after[2] - gcBefore[2]; total > 0 {
				g.CPUFraction = g.CPUS / total
			}
			usage.GC = g
		}
	}
	select {
	case <-stop:
	default:
		close(stop)
	}

	// The readers own the read side: disconnect, let them see the broker close, then close.
	all := append(append([]*client(nil), pubClients...), subClients...)
	clear(pubClients) // closed here, not by the deferred closeAll
	clear(subClients)
	for _, c := range all {
		c.closing.Store(true)
		_ = c.write(disconnectPacket)
	}
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait):
		for _, c := range all {
			_ = c.nc.SetReadDeadline(time.Now())
		}
		<-done
	}
	for _, c := range all {
		c.rd.Release()
		c.nc.Close()
	}

	r := &TrafficResult{}
	var hist Histogram
	var firstSend, lastSend, lastRecv int64
	for _, p := range pubs {
		sent := p.sent.Load()
		r.Sent += sent
		r.Expected += sent * p.subs
		r.Acked += p.acked.Load()
		r.Stalls += p.stalls
		if sent > 0 {
			if firstSend == 0 || p.firstSend < firstSend {
				firstSend = p.firstSend
			}
			lastSend = max(lastSend, p.lastSend)
		}
	}
	var foreign int64
	for _, s := range subs {
		r.Received += s.received.Load()
		lastRecv = max(lastRecv, s.last.Load())
		hist.Merge(&s.hist)
		foreign += s.foreign
	}
	if foreign > 0 {
		errs.add("subscriber", fmt.Errorf("%d PUBLISHes from outside this run", foreign))
	}
	checkSequences(r, pubs, subs, o.QoS, errs)
	if firstSend == 0 {
		firstSend = start
	}
	r.Lost = r.Expected - r.Received
	r.SendS = float64(lastSend-firstSend) / 1e9
	r.RecvS = float64(lastRecv-firstSend) / 1e9
	if r.SendS > 0 {
		r.SentRate = float64(r.Sent) / r.SendS
	}
	if r.RecvS > 0 {
		r.RecvRate = float64(r.Received) / r.RecvS
	}
	r.Latency = latencyOf(&hist)
	if usage != nil && usage.CPUS > 0 {
		usage.MsgsPerCPUS = float64(r.Received) / usage.CPUS
	}
	return &Report{Traffic: r, Broker: usage}, nil
}

// checkSequences adds up what the subscribers' sequence numbers show (duplicates,
// messages out of order) and names the first missing messages at QoS 1 and 2, where
// none may be missing: which publisher's, which subscriber's, and whether the publisher
// was told the broker had it.
func checkSequences(r *TrafficResult, pubs []*publisher, subs []*subscriber, qos byte, errs *errorLog) {
	for si, s := range subs {
		for k := range s.seqs {
			q := &s.seqs[k]
			r.Duplicates += q.dups
			r.Reordered += q.reordered
			if qos == 0 {
				continue
			}
			p := pubs[s.first+k]
			n, first := q.missing(p.sent.Load(), errorsKept)
			for _, seq := range first {
				errs.add("missing", fmt.Errorf("subscriber %d: message %d of publisher %d (of %d missing there; the publisher has %d of %d acknowledged)",
					si, seq, s.first+k, n, p.acked.Load(), p.sent.Load()))
			}
		}
	}
	if r.Duplicates > 0 && qos > 0 {
		errs.add("duplicates", fmt.Errorf("%d deliveries of messages received already", r.Duplicates))
	}
}

// errCutShort says why the messages still missing when the run's bound ended it are not
// known to be lost: they may have been on their way.
var errCutShort = errors.New("-timeout ended the wait for the last deliveries: lost counts what had not arrived by then " +
	"(a -timeout longer than -duration leaves time for them)")

// awaitDeliveries waits until every delivery due has arrived (and, with acks, every PUBLISH has
// been acknowledged), until none has arrived for awaitIdle, or awaitMax at most. It reports
// false when ctx ended the wait first.
func awaitDeliveries(ctx context.Context, pubs []*publisher, subs []*subscriber, acks bool) (waited bool) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(awaitMax)
	var lastProgress int64
	lastSeen := time.Now()
	for time.Now().Before(end) {
		var due, got, unacked, progress int64
		for _, p := range pubs {
			sent := p.sent.Load()
			due += sent * p.subs
			if acks {
				unacked += sent - p.acked.Load()
			}
			progress += p.acked.Load()
		}
		for _, s := range subs {
			got += s.received.Load()
		}
		progress += got
		if got >= due && unacked <= 0 {
			return true
		}
		if progress != lastProgress {
			lastProgress, lastSeen = progress, time.Now()
		} else if time.Since(lastSeen) > awaitIdle {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// dialConnect dials the i-th connection and opens an MQTT session on it.
func dialConnect(ctx context.Context, d *dialer, i int, o connectOptions) (*client, error) {
	nc, err := d.dial(ctx, i)
	if err != nil {
		return nil, err
	}
	c, err := connect(nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// parallel calls fn(i) for i in [0, n) on at most width goroutines and returns the first
// error; after an error or the end of ctx it starts no more calls.
func parallel(ctx context.Context, n, width int, fn func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(width, 1) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// closeAll disconnects the non-nil clients, several at a time, and waits for the broker to
// close each (closeWait at most).
func closeAll(cs []*client) {
	deadline := time.Now().Add(closeWait)
	_ = parallel(context.Background(), len(cs), 256, func(i int) error {
		if cs[i] != nil {
			cs[i].close(deadline)
		}
		return nil
	})
}

// runID names a run's client ids and topics, so that two runs never share either.
func runID() string {
	return fmt.Sprintf("%x", uint32(time.Now().UnixNano())^uint32(os.Getpid()<<16))
}
