package interop

import _ "github.com/bifrost-mqtt/bifrost/endpoint" // the tests read /metrics and the dashboard
