// Command minimal is the smallest program that embeds bifrost: one TCP listener, no store,
// no HTTP endpoint, no cluster. docs/lab/edge.md measures what it links and what it costs, so
// that the embedding API drags in nothing an embedder does not ask for.
//
//	go run ./examples/minimal [-addr 127.0.0.1:1883]
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/bifrost-mqtt/bifrost"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:1883", "MQTT listener address")
	flag.Parse()
	cfg := bifrost.DefaultEdgeConfig()
	cfg.Listeners = []bifrost.Listener{{Name: "mqtt", Type: "tcp", Address: *addr}}
	cfg.HTTP.Address = "off"
	cfg.Store.Dir = "off"
	b, err := bifrost.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := b.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	if err := b.Close(); err != nil {
		log.Fatal(err)
	}
}
