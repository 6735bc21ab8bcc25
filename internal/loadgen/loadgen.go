// Package loadgen is the load generator behind `bifrost-bench`: it measures an MQTT broker
// running on this machine (bifrost or any other) the way DESIGN.md's "What we measure"
// asks, so that bifrost and Mosquitto are measured alike in the same run.
//
// Two kinds of run:
//
//   - conns opens N idle connections (MQTT 3.1.1 or 5.0, clean session, optionally one
//     subscription each to a topic of its own) and, given the broker's pid, reports the
//     broker's RSS and PSS per connection: the growth of VmRSS (/proc/PID/status) and Pss
//     (/proc/PID/smaps_rollup) from before the first connection to after all of them have
//     been idle for a settle time, divided by N. One process may hold only as many sockets
//     as its RLIMIT_NOFILE allows, so past Options.PerProcess connections the run
//     re-executes the binary as worker processes, each holding a share, and adds up their
//     reports. Connections come from several loopback source addresses (127.0.0.2, ...).
//   - fanin (P publishers, S subscribers, 1 by default, on one topic), fanout (1
//     publisher, S subscribers) and pair (K publisher/subscriber pairs, a topic each)
//     send PUBLISHes at QoS 0, 1 or 2 and report messages per second sent and received,
//     the messages lost, duplicated and out of order, the latency percentiles, and,
//     given the pid, the broker's CPU time and messages per broker CPU-second.
//
// Latency is measured within this process: every payload starts with the publisher's send
// time on the monotonic clock, its publisher's index and a sequence number (16 bytes, so
// payloads are at least that large), and the subscriber that receives it subtracts. The
// subscriber also marks the sequence number in a bit set per publisher (sequence.go), so
// that a message missing is told apart from one delivered twice, and named.
//
// The load is generated on raw TCP connections with bifrost's own codec (internal/packet),
// one goroutine per connection, each publisher writing a pre-encoded PUBLISH whose packet
// identifier and payload header are patched in place and batched into one write. The tool
// and the broker share the machine's cores, so the tool spends as little as it can; it
// reports its own CPU time next to the broker's so that a reader can tell which one was
// the bottleneck.
//
// Publishing is either open loop (Options.Rate > 0: each publisher sends Rate messages per
// second on schedule) or closed loop (Rate 0: each publisher keeps at most Inflight
// messages that not every subscriber has received yet, and at QoS 1 and 2 at most
// Inflight that the broker has not acknowledged). The closed loop measures what the broker
// sustains without filling its queues; its latency is the latency at that throughput. A
// closed-loop publisher refills its window in batches of a quarter of it (up to 32
// messages), and subscribers wake it only when a batch fits, so that a slow broker costs
// the tool a write per batch rather than one per delivery.
// A message a broker drops (QoS 0 shed to a slow consumer, a full queue) would close the
// window for good, so a publisher that has waited for stallTimeout without any message of
// its reaching a subscriber writes its outstanding messages off and goes on; the report
// counts them as lost all the same.
//
// Every run is bounded in time (Duration, and Timeout around everything) and stops by
// itself, closing its connections with DISCONNECT.
package loadgen

import "time"

// base anchors the monotonic clock: a send time is the nanoseconds since base, so that a
// payload carries 8 bytes rather than a time.Time.
var base = time.Now()

// now returns the nanoseconds elapsed since base on the monotonic clock.
func now() int64 { return int64(time.Since(base)) }
