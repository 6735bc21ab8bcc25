// Package hostile attacks bifrost the way a bad client on the internet would: over real
// sockets, with truncated, oversized, ill-flagged and ill-encoded packets, packets out of
// order, topic names built to escape, slowloris and half-open connections, subscription
// floods and a client that never reads. Each case checks the answer the MQTT 3.1.1 and 5.0
// specifications prescribe (a reason code, a closed connection) and that a healthy Eclipse
// Paho client beside the attacker keeps publishing and receiving throughout, with the
// broker's heap bounded.
//
// The broker runs in-process on random loopback ports. BIFROST_CI=1 scales the heavy cases
// down (5,000 half-open connections instead of 10,000) so the suite stays under a minute
// under -race.
//
// The package holds tests only; this file exists to document it.
package hostile
