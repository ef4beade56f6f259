package main

import (
	"context"
	"io"
	"log/slog"
	"strings"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

// command is a subcommand contributed by its own file: flags declares its
// settings before parsing, run executes it.
type command struct {
	flags func(c *daemon.Config)
	run   func(ctx context.Context, app *serve.App, s serve.Settings, getenv func(string) string, log *slog.Logger, stdout io.Writer) error
}

// commands maps "command sub" to its implementation.
var commands = map[string]*command{}

// hasSubcommands reports whether some registered command starts with cmd.
func hasSubcommands(cmd string) bool {
	for k := range commands {
		if strings.HasPrefix(k, cmd+" ") {
			return true
		}
	}
	return false
}
