package hostile

import _ "github.com/bifrost-mqtt/bifrost/endpoint" // the tests read the broker's /metrics
