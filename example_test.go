package bifrost_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"

	"github.com/bifrost-mqtt/bifrost"
)

// A program embeds the broker: defaults, with the operator endpoint on a free port.
func Example() {
	cfg := bifrost.DefaultConfig()
	cfg.HTTP.Address = "127.0.0.1:0"
	b, err := bifrost.New(cfg, bifrost.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	resp, err := http.Get("http://" + b.HTTPAddr().String() + "/healthz")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s %s", resp.Status, body)
	// Output: 200 OK ok
}
