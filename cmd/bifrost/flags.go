package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseConfigFlag parses a subcommand's flags, of which there is one: -c FILE. It returns
// the exit code to stop with when the arguments are not usable (0 after -h), or -1 to go on.
func parseConfigFlag(cmd string, args []string, stderr io.Writer) (path string, exit int) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&path, "c", "", "config `file`")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", 0
		}
		return "", 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bifrost %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return "", 2
	}
	return path, -1
}
