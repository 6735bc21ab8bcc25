package conf_test

import (
	"errors"
	"fmt"

	"github.com/bifrost-mqtt/bifrost/conf"
)

// A Config built in Go names only what differs from the defaults; EnsureDefaults fills
// the rest and Validate reports every problem at once.
func ExampleConfig() {
	c := &conf.Config{
		Listeners: []conf.Listener{{Type: conf.ListenerTCP, Address: "127.0.0.1:1884"}},
		Store:     conf.Store{Dir: conf.StoreOff},
		MQTT:      conf.MQTT{MaxQoS: new(int)}, // an explicit 0: QoS 0 only
	}
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Listeners[0].Name, c.MQTT.ReceiveMaximum, *c.MQTT.MaxQoS, c.Queue.OfflineBytes)

	c.MQTT.ReceiveMaximum = 0 // after EnsureDefaults, a zero is invalid
	c.Listeners[0].Type = "udp"
	var e conf.Error
	err := c.Validate()
	errors.As(err, &e)
	fmt.Println(e.Field)
	fmt.Println(err)
	// Output:
	// tcp@127.0.0.1:1884 1024 0 16MiB
	// listeners[0].type
	// listeners[0].type: "udp" is not one of tcp, tls, ws, wss
	// mqtt.receive_maximum: 0 is out of range 1..65535
}
