// Package cluster runs bifrost clusters as separate processes on loopback
// (harness_test.go) and checks what the cluster promises with real processes that are
// started, killed (SIGKILL), paused (SIGSTOP) and restarted: forming, joining, refusing
// strangers, and what the cluster's other parts add (docs/cluster.md).
package cluster
