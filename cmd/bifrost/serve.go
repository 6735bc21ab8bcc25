package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/bifrost-mqtt/bifrost"
	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/logging"
)

// serve runs the broker until SIGINT or SIGTERM, then closes it gracefully and returns 0.
// It logs to stderr as the config's log section says.
func serve(args []string, stderr io.Writer) int {
	path, exit := parseConfigFlag("serve", args, stderr)
	if exit >= 0 {
		return exit
	}
	cfg, err := conf.LoadOrDefault(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	log, level := logging.New(cfg.Log, stderr)
	b, err := bifrost.New(cfg, bifrost.WithLogger(log), bifrost.WithLogLevel(level), bifrost.WithConfigFile(path))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}

	// Subscribe before Start: a signal sent as soon as the endpoint is announced is caught.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	source := path
	if source == "" {
		source = "built-in defaults"
	}
	log.Info("bifrost starting", "version", version, "config", source)
	if err := b.Start(context.Background()); err != nil {
		log.Error("start failed", "err", err)
		_ = b.Close()
		return 1
	}
	for sig := range sigs {
		if sig == syscall.SIGHUP {
			reload(b, path, log)
			continue
		}
		log.Info("shutting down", "signal", sig.String())
		break
	}
	if err := b.Close(); err != nil {
		log.Error("shutdown incomplete", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}
