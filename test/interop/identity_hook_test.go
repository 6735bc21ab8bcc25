package interop_test

import "github.com/bifrost-mqtt/bifrost/test/interop"

// The identity tests (package interop) run the binary this package builds once.
func init() { interop.BrokerBinary = mqBuild }
