package bifrost_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/testenv"
)

// TestClusterSys: a cluster node publishes the cluster's totals under $SYS/broker/cluster/
// every sys_interval, and a retained message published through the embedding API goes
// through the cluster's replicated set (its size is one of the totals).
func TestClusterSys(t *testing.T) {
	cfg := testConfig(t)
	iv := conf.Duration(50 * time.Millisecond)
	cfg.SysInterval = &iv
	cfg.Cluster = &bifrost.Cluster{NodeName: "solo", Bind: "127.0.0.1:0", RPC: "127.0.0.1:0", BootstrapExpect: 1}
	var logs syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs.String())
		}
	})
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]string{}
	if _, err := b.Subscribe("$SYS/broker/cluster/#", func(m bifrost.Message) {
		mu.Lock()
		got[m.Topic] = string(m.Payload)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish("kept/1", []byte("v"), 1, true); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"$SYS/broker/cluster/nodes":                   "1",
		"$SYS/broker/cluster/nodes/reporting":         "1",
		"$SYS/broker/cluster/clients/connected":       "0",
		"$SYS/broker/cluster/subscriptions/count":     "1",
		"$SYS/broker/cluster/retained messages/count": "1",
	}
	testenv.WaitFor(t, "the cluster's totals in $SYS", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for topic, v := range want {
			if got[topic] != v {
				return false
			}
		}
		return true
	})
}
