// Command euterpe-edge is the Jetson daemon: the Redis Streams job gateway
// with its SSE event streams, plus every component registered in this
// package (workers, the media library), run under systemd.
//
//	euterpe-edge serve [flags]   run the daemon (flags or EUTERPE_* variables)
//	euterpe-edge sync quarantine list|resend
//	                             see and resend the sync batches central refused
//	euterpe-edge version         print the version
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/vesta-cx/euterpe/daemon"
)

func main() {
	// Before anything else: the programs the daemon runs must not read its
	// secrets through /proc (daemon.HideFromChildren).
	if err := daemon.HideFromChildren(); err != nil {
		fmt.Fprintln(os.Stderr, "euterpe-edge:", err)
		os.Exit(1)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr, getenv)
	case "sync":
		return syncCommand(ctx, args[1:], stdout, stderr, getenv)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, daemon.Version)
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		if len(args) > 1 && args[1] == "serve" {
			cfg, _ := newServeConfig(getenv)
			cfg.Usage(stdout)
		}
		return 0
	default:
		// The word is quoted back, less a URL's password: a setting's
		// value given without its flag lands here.
		fmt.Fprintf(stderr, "euterpe-edge: unknown command %q\n", daemon.CapMessage(daemon.RedactURL(args[0])))
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: euterpe-edge <command>
  serve     run the gateway, event streams and registered components
  sync quarantine list              print the sync batches central refused
  sync quarantine resend ID… | --all
            put them back into the spool, sent again by the daemon
  version   print the version
  help serve   list every setting of serve
`)
}
