package store

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// BenchmarkCommit measures commits per second of each engine under each sync policy,
// with 1 and 16
// committers that each wait for their done before committing again, as a publisher
// waits for its PUBACK. A commit is what a QoS 1 PUBLISH to one persistent session
// writes: a 128-byte message and a queue entry. The store has the server profile's
// sizes, and is loaded first, as the broker loads it.
//
//	go test -run '^$' -bench Commit -benchmem ./internal/store/
func BenchmarkCommit(b *testing.B) {
	for _, engine := range testEngines() {
		for _, policy := range []string{conf.SyncAlways, conf.SyncInterval, conf.SyncNone} {
			for _, committers := range []int{1, 16} {
				benchmarkCommit(b, engine, policy, committers)
			}
		}
	}
}

func benchmarkCommit(b *testing.B, engine, policy string, committers int) {
	b.Run(fmt.Sprintf("Engine=%s/Sync=%s/Committers=%d", engine, policy, committers), func(b *testing.B) {
		cfg := conf.Default().Store
		cfg.Dir, cfg.Sync, cfg.Engine = b.TempDir(), policy, engine
		s, err := openHooked(cfg, testLogger(b), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		load(b, s) // as the broker does at start
		payload := make([]byte, 128)
		groups := s.groups.Load()
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for c := range committers {
			wg.Go(func() {
				var batch Batch
				client := fmt.Sprint("client", c)
				done := make(chan error, 1)
				for {
					id := next.Add(1)
					if id > int64(b.N) {
						return
					}
					batch.Reset()
					batch.PutMessage(uint64(id), MessageRecord{Topic: []byte("bench/topic"), Payload: payload, QoS: 1})
					batch.PutQueued(client, uint64(id), QueuedRecord{MessageID: uint64(id), QoS: 1})
					s.Commit(&batch, func(err error) { done <- err })
					if err := <-done; err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
		b.ReportMetric(float64(b.N)/float64(s.groups.Load()-groups), "commits/group")
	})
}
