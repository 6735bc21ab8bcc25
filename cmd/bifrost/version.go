package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release, stamped at build time:
//
//	go build -ldflags "-X main.version=v0.1.0" ./cmd/bifrost
var version = "dev"

// printVersion prints the version, the Go toolchain and platform, and the VCS revision
// the binary was built from when the build recorded one (-buildvcs).
func printVersion(w io.Writer) int {
	fmt.Fprintf(w, "bifrost %s %s %s/%s", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if info, ok := debug.ReadBuildInfo(); ok {
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			fmt.Fprintf(w, " revision %s", rev)
			if modified == "true" {
				fmt.Fprint(w, " (modified)")
			}
		}
	}
	fmt.Fprintln(w)
	return 0
}
