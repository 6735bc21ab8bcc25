package main

import (
	"fmt"
	"io"

	"github.com/bifrost-mqtt/bifrost/conf"
	"github.com/bifrost-mqtt/bifrost/internal/clusterlink"
)

// checkConfig loads the file named by -c as serve would, printing "FILE: ok", or every
// problem found, one per line (file:line: field: message), to stderr.
func checkConfig(args []string, stdout, stderr io.Writer) int {
	path, exit := parseConfigFlag("check-config", args, stderr)
	if exit >= 0 {
		return exit
	}
	if path == "" {
		fmt.Fprintln(stderr, "bifrost check-config: -c FILE is required")
		return 2
	}
	cfg, err := conf.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err) // conf.Errors prints one problem per line
		return 1
	}
	if cfg.Cluster != nil && !clusterlink.Linked() {
		fmt.Fprintf(stderr, "%s: cluster: %v\n", path, clusterlink.ErrNotLinked)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	return 0
}
