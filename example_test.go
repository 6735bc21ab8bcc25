package bifrost_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/bifrost-mqtt/bifrost"
)

// A program embeds the broker, listens to what clients publish and publishes itself.
func Example() {
	cfg := bifrost.DefaultConfig()
	cfg.HTTP.Address = "off"
	cfg.Store.Dir = "off" // nothing kept across restarts; a directory keeps sessions and queues
	for i := range cfg.Listeners {
		cfg.Listeners[i].Address = "127.0.0.1:0" // any free port
	}
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	got := make(chan string, 1)
	unsubscribe, err := b.Subscribe("sensors/+/temperature", func(topic string, payload []byte) {
		got <- topic + " " + string(payload) // runs on the publisher's goroutine: do not block
	})
	if err != nil {
		log.Fatal(err)
	}
	defer unsubscribe()

	if err := b.Publish("sensors/kitchen/temperature", []byte("21.5"), 1, false); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-got)
	// Output: sensors/kitchen/temperature 21.5
}
