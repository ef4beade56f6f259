// Command euterpectl is the operator's client for the Euterpe daemons.
// Subcommands live in a table: each file of this package registers its own
// with register, e.g. "jobs submit" or "webhook verify".
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/vesta-cx/euterpe/daemon"
)

// Env is what a subcommand runs with.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// Command is one entry of the table. Run returns the exit status.
type Command struct {
	Path    string // words that select it, e.g. "jobs submit"
	Usage   string // arguments, e.g. "--task T --payload @file.json [--follow]"
	Summary string
	Run     func(ctx context.Context, env Env, args []string) int
}

var commands = map[string]*Command{}

// register adds c to the table; a duplicate path is a programming error.
func register(c *Command) {
	if _, dup := commands[c.Path]; dup {
		panic("euterpectl: command registered twice: " + c.Path)
	}
	commands[c.Path] = c
}

func init() {
	register(&Command{Path: "version", Summary: "print the version", Run: func(_ context.Context, env Env, _ []string) int {
		fmt.Fprintln(env.Stdout, daemon.Version)
		return 0
	}})
}

func main() {
	ctx, stop := daemon.SignalContext(context.Background())
	code := dispatch(ctx, Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// dispatch runs the command whose path is the longest prefix of args.
func dispatch(ctx context.Context, env Env, args []string) int {
	for n := len(args); n > 0; n-- {
		if c, ok := commands[strings.Join(args[:n], " ")]; ok {
			return c.Run(ctx, env, args[n:])
		}
	}
	if len(args) > 0 && args[0] != "help" && args[0] != "-h" && args[0] != "--help" {
		fmt.Fprintf(env.Stderr, "euterpectl: unknown command %q\n", strings.Join(args, " "))
		printUsage(env.Stderr)
		return 2
	}
	printUsage(env.Stdout)
	return 0
}

func printUsage(w io.Writer) {
	paths := make([]string, 0, len(commands))
	for p := range commands {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	fmt.Fprintln(w, "usage: euterpectl <command> [args]")
	for _, p := range paths {
		c := commands[p]
		fmt.Fprintf(w, "  %-16s %-44s %s\n", p, c.Usage, c.Summary)
	}
}
