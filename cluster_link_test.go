package bifrost_test

import _ "github.com/bifrost-mqtt/bifrost/cluster" // this package's tests run cluster nodes
