// Command euterpectl is the operator's client for the Euterpe daemons.
// Subcommands live in a table: each file of this package registers its own
// with register, e.g. "jobs submit" or "webhook verify".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

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
	register(&Command{Path: "version", Summary: "print the version", Run: func(_ context.Context, env Env, args []string) int {
		if len(args) > 0 {
			fmt.Fprintf(env.Stderr, "euterpectl: unexpected argument %q; usage: version\n", clip(args[0], 80))
			return 2
		}
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
			out := &recordingWriter{w: env.Stdout}
			env.Stdout = out
			code := c.Run(ctx, env, args[n:])
			if out.err != nil && code == 0 {
				report(env, fmt.Errorf("writing the output: %w", out.err))
				return 1
			}
			return code
		}
	}
	if len(args) > 0 && args[0] != "help" && args[0] != "-h" && args[0] != "--help" {
		fmt.Fprintf(env.Stderr, "euterpectl: unknown command %q\n", commandWords(args))
		printUsage(env.Stderr)
		return 2
	}
	printUsage(env.Stdout)
	return 0
}

// commandWords is what an unknown command line is named by: its words up
// to the first flag, not the flags, whose values (--token, a --server
// with a password) may be secrets.
func commandWords(args []string) string {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		words = append(words, a)
	}
	return clip(daemon.RedactURL(strings.Join(words, " ")), 200)
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

// positional parses flags and wants exactly n positional arguments. One
// too many is named rather than dropped: it is most often a value meant
// for a flag, and acting without it would do something other than what
// was asked.
func positional(fs *flag.FlagSet, env Env, args []string, n int, usage string) ([]string, int, bool) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, usageExit(err), false
	}
	switch {
	case len(pos) > n:
		fmt.Fprintf(env.Stderr, "euterpectl: unexpected argument %q; usage: %s\n", clip(pos[n], 80), usage)
		return nil, 2, false
	case len(pos) < n:
		fmt.Fprintf(env.Stderr, "euterpectl: usage: %s\n", usage)
		return nil, 2, false
	}
	return pos, 0, true
}

// usageExit is the exit status for a command line the flags refused: 0
// when help was asked for (-h, -help; the flags were printed, as Go's flag
// package exits on its own), 2 for a usage error.
func usageExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// report prints err as one line. Errors carry what others sent (a
// server's message, a URL the user gave), so the line is capped and any
// password in a URL is hidden.
func report(env Env, err error) {
	fmt.Fprintln(env.Stderr, "euterpectl:", daemon.CapMessage(daemon.RedactURL(err.Error())))
}

// clip cuts s, text a server or the user chose, to at most n bytes
// without splitting a UTF-8 sequence.
func clip(s string, n int) string {
	s = daemon.CapMessage(s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// serverURL checks a --server value, to which every request path is
// appended: a query or fragment would swallow the path, and a value
// without a scheme would fail on each request instead of once.
func serverURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		// Neither the parse error nor a value that did not parse is
		// shown: both may hold a password in the user info.
		shown := "value"
		if err == nil {
			shown = clip(shownURL(u), 200)
		} else if !strings.ContainsAny(raw, "@?#") {
			shown = clip(raw, 200)
		}
		return "", fmt.Errorf("--server %s: want http://HOST[:PORT][/PREFIX] or https://…", shown)
	}
	return strings.TrimRight(raw, "/"), nil
}

// httpClient is the client of both servers. It follows no redirect: Go
// would follow a 301 or 302 of a POST as a GET without its body (behind a
// proxy that sends http to https, an enqueue would print the job list and
// exit 0 having enqueued nothing) and would send the token again wherever
// the answer points. It waits at most timeout for an answer's headers,
// which both servers' event streams send at once; a stream then runs for
// as long as the user wants (the fleet tail, --follow), so the client has
// no overall timeout: a request that is not a stream gets one from
// withTimeout, and Ctrl-C ends any through the context.
func httpClient(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = timeout
	return &http.Client{Transport: t, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("--server answered with a redirect to %s: use that URL as --server", clip(shownURL(req.URL), 200))
	}}
}

// defaultTimeout is --timeout's default: ample for any answer of either
// API but a job's largest result over a slow link, short enough that a
// server that accepts and never answers (one stuck, a proxy with nothing
// behind it) is named within a minute rather than waited on for ever.
const defaultTimeout = 60 * time.Second

// timeoutFlag declares --timeout on fs.
func timeoutFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("timeout", defaultTimeout,
		"longest wait for the server: for a request's whole answer, and for the start of an event stream")
}

// checkTimeout refuses a --timeout that would fail every request at once.
func checkTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("--timeout must be a positive duration, e.g. 60s, not %s", d)
	}
	return nil
}

// errNoAnswer is the cause of a request's context whose --timeout ran out.
var errNoAnswer = errors.New("no answer")

// withTimeout bounds a request that is not a stream, its answer read in
// full included, to d.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, errNoAnswer)
}

// timedOut names a request that went unanswered for --timeout: Go's own
// words ("context deadline exceeded", "timeout awaiting response
// headers") say neither which limit it was nor how to change it. An
// interrupt (Ctrl-C) is left as it is.
func timedOut(ctx context.Context, err error, d time.Duration) error {
	var ue *url.Error
	isURL := errors.As(err, &ue)
	if !errors.Is(context.Cause(ctx), errNoAnswer) && (ctx.Err() != nil || !isURL || !ue.Timeout()) {
		return err
	}
	if isURL {
		return fmt.Errorf("%w within %s (--timeout): %s %s", errNoAnswer, d, ue.Op, ue.URL)
	}
	// The headers came in time, the rest of the answer did not.
	return fmt.Errorf("the answer did not arrive in full within %s (--timeout)", d)
}

// readAnswer reads a 2xx answer's body, refusing one past max bytes with
// an error that says so (a JSON decoder cut short would only say EOF).
func readAnswer(r io.Reader, max int64, server string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s's answer is over %d MiB", server, max>>20)
	}
	return b, nil
}

// shownURL is u as errors and usage text name it: without a password,
// nor a query or fragment, where a proxy's access token would be.
func shownURL(u *url.URL) string {
	v := *u
	v.RawQuery, v.ForceQuery, v.Fragment, v.RawFragment = "", false, "", ""
	s := v.Redacted()
	if u.RawQuery != "" || u.ForceQuery {
		s += "?…"
	}
	if u.Fragment != "" {
		s += "#…"
	}
	return s
}

// recordingWriter keeps the first error of its writes: output that did
// not reach its file (a full disk) is a failure, whatever the command
// made of it.
type recordingWriter struct {
	w   io.Writer
	err error
}

// outputFailed reports whether a write to env's stdout has failed: a
// command that would otherwise go on printing for as long as the user
// wants (a follow) stops then, since nothing it prints can arrive.
func outputFailed(env Env) bool {
	r, ok := env.Stdout.(*recordingWriter)
	return ok && r.err != nil
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

// hideDefaultPassword keeps a password, query or fragment in the default
// of flag name (a server URL from the environment) out of the usage text
// that -h and every flag error print.
func hideDefaultPassword(fs *flag.FlagSet, name string) {
	if f := fs.Lookup(name); f != nil {
		if u, err := url.Parse(f.DefValue); err == nil {
			f.DefValue = shownURL(u)
		} else if f.DefValue = daemon.RedactURL(f.DefValue); strings.ContainsAny(f.DefValue, "?#") {
			f.DefValue = "(unreadable URL)"
		}
	}
}
