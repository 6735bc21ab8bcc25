package broker

import "github.com/bifrost-mqtt/bifrost/internal/session"

// noRoutes is the routing part of a test Cluster with no peers: nothing is routed
// elsewhere and nothing waits.
type noRoutes struct{}

func (noRoutes) AddRoute(string, func()) bool                { return false }
func (noRoutes) RemoveRoute(string)                          {}
func (noRoutes) RemoteGroup(string) bool                     { return false }
func (noRoutes) Forward(*Outbound) int                       { return 0 }
func (noRoutes) ForwardShared(*session.Message, string) bool { return false }
