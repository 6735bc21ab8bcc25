package cluster

import (
	"github.com/bifrost-mqtt/bifrost/internal/broker"
	"github.com/bifrost-mqtt/bifrost/internal/session"
)

// nopHost is a broker.ClusterHost of a node without clients, answering as the helpers of
// host.go do without a host: the test hosts embed it and give the methods their test
// watches.
type nopHost struct{}

var _ broker.ClusterHost = nopHost{}

func (nopHost) Fence(uint64, []string) {}

func (nopHost) HandOver(string, uint64, bool) broker.HandoverResult {
	return broker.HandoverResult{Outcome: broker.NoSession}
}

func (nopHost) SelfFence() {}

func (nopHost) ApplyRetained([]byte, *session.Message) {}

func (nopHost) ReplaceRetained(func(func([]byte, *session.Message) bool)) {}

func (nopHost) BeginForwarded() *broker.Inbound { return nil }

func (nopHost) RoutedFilters(fn func([]string)) { fn(nil) }

func (nopHost) Sessions(uint32, int, broker.SessionFilter) ([]broker.SessionInfo, uint32) {
	return nil, 0
}

func (nopHost) Figures() broker.SysFigures { return broker.SysFigures{} }

func (nopHost) Publish(string, []byte, uint8, bool) error { return nil }
