package bifrost_test

import _ "github.com/bifrost-mqtt/bifrost/endpoint" // this package's tests read /metrics, /healthz and the admin API
