// Command bifrost runs the bifrost MQTT broker.
//
//	bifrost [serve] [-c FILE]      run the broker (the default command); no -c: built-in defaults
//	bifrost check-config -c FILE   check a config file, print every problem, exit 1 if any
//	bifrost passwd [-c|-b|-D] FILE USER   manage a password file, as mosquitto_passwd does
//	bifrost version                print the version, the Go version and the VCS revision
//
// serve stops gracefully on SIGINT or SIGTERM; SIGHUP re-reads the config file.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit code: 0 success, 1 failure, 2 misuse.
func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args, stderr)
	case "check-config":
		return checkConfig(args, stdout, stderr)
	case "bench":
		// The load tool is a command of its own (the broker links none of it): say which.
		fmt.Fprintln(stderr, "bifrost: the load tool is the command bifrost-bench: "+
			"bifrost-bench MODE [flags], or go run ./cmd/bifrost-bench MODE [flags] in the source tree")
		return 2
	case "passwd":
		return passwd(args, os.Stdin, stdout, stderr)
	case "version":
		return printVersion(stdout)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "bifrost: unknown command %q\n%s", cmd, usage)
	return 2
}

const usage = `usage:
  bifrost [serve] [-c FILE]      run the broker; without -c, on built-in defaults
  bifrost check-config -c FILE   check a config file
  bifrost passwd FILE USER       set a user's password in a password file (bifrost passwd -h)
  bifrost version                print version information
`
