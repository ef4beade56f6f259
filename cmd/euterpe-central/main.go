// Command euterpe-central is the cloud transcode service: `serve` runs the
// HTTP API and the enabled roles, `migrate` applies the schema, `requester
// create` issues API keys, `keys generate|rewrap` manage credential KEKs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

const usage = `usage: euterpe-central [command] [flags]

commands:
  serve                       run the API and the enabled roles (default)
  migrate                     apply database migrations and exit
  requester create --name N   create a requester; prints {requester_id, api_key, webhook_secret} once
  keys generate [--id ID]     print a new keyring entry for EUTERPE_KEYRING
  keys rewrap                 move stored credentials, webhook and edge sync secrets to the active KEK
  requester rotate-secret --id ID [--overlap 24h]
                              new webhook secret (printed once); the old one still signs during the overlap
  outbox redrive [--event-id ID,…] [--job-id ID] [--since RFC3339|duration]
                              put dead-lettered outbox events back for delivery
  operator create --name N    create an operator; prints {operator_id, name, token} once
  operator disable --id ID    stop an operator's token from opening the operator API
  edge register --name N      register an edge; prints {edge_id, name, sync_secret} once
  edge rotate-secret --id ID [--overlap 24h]
                              new sync secret (printed once); the old one is still accepted during the overlap
  edge disable --id ID        refuse an edge's batches and heartbeats (403 edge_disabled)
  edge enable --id ID         let a disabled edge's batches and heartbeats in again
  pipeline backfill --type T --symbol S --from YYYY-MM-DD --to YYYY-MM-DD
                              enqueue one pipeline job per day (existing active jobs are kept)
  pipeline storage-credentials --access-key-id ID < secret-key
                              seal the S3 credentials of an s3:// EUTERPE_PIPELINE_STORAGE
  version                     print the version

settings (flag, then environment, then default):
`

func main() {
	// Before anything else: the programs the daemon runs must not read its
	// secrets through /proc (daemon.HideFromChildren).
	if err := daemon.HideFromChildren(); err != nil {
		fmt.Fprintln(os.Stderr, "euterpe-central:", err)
		os.Exit(1)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is main without the process: customize adjusts the composition
// (tests add a test executor role through it).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, customize ...func(*serve.App)) int {
	out := &recordingWriter{w: stdout}
	code := runCommand(ctx, args, getenv, out, stderr, customize...)
	if out.err != nil && code == 0 {
		// What a command prints (a new key, a requester's secrets) exists
		// nowhere else: output that did not reach its file is a failure.
		fmt.Fprintln(stderr, "euterpe-central: writing the output:", daemon.CapMessage(out.err.Error()))
		return 1
	}
	return code
}

// recordingWriter keeps the first error of its writes.
type recordingWriter struct {
	w   io.Writer
	err error
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}

func runCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, customize ...func(*serve.App)) int {
	app := serve.NewApp()
	register(app)
	for _, f := range customize {
		f(app)
	}
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	sub := ""
	if (cmd == "requester" || cmd == "keys" || cmd == "outbox" || hasSubcommands(cmd)) && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	var s serve.Settings
	cfg := daemon.NewConfig("euterpe-central", getenv)
	app.Bind(cfg, &s)
	var dumpable bool
	daemon.DeclareDumpable(cfg, &dumpable)
	var name, keyID string
	if cmd == "requester" {
		cfg.String(&name, "name", "", "", "requester name (requester create)", nil)
	}
	if cmd == "keys" {
		cfg.String(&keyID, "id", "", "", "kek_id for keys generate (default: a dated id)", nil)
	}
	extra := commands[cmd+" "+sub]
	if extra != nil {
		extra.flags(cfg)
	}
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		cfg.Usage(stdout)
		return 0
	case "version":
		fmt.Fprintln(stdout, daemon.Version)
		return 0
	}
	err := cfg.Parse(args)
	if err == nil {
		err = cfg.NoArgs()
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		cfg.Usage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "euterpe-central:", err)
		return 2
	}
	log, err := daemon.NewLogger(stderr, s.LogLevel)
	if err != nil {
		fmt.Fprintln(stderr, "euterpe-central:", err)
		return 2
	}
	// What logs through slog's default or the standard log (a library's
	// fallback, net/http) is then a JSON line with secrets redacted too.
	slog.SetDefault(log)
	cfg.WarnSecretFlags(log)
	cfg.WarnMisspelledEnv(log, os.Environ())
	if err := daemon.ApplyDumpable(log, dumpable); err != nil {
		fmt.Fprintln(stderr, "euterpe-central:", err)
		return 1
	}
	dispatchFn := func() error { return dispatch(ctx, app, cmd, sub, s, name, keyID, getenv, log, stdout) }
	if extra != nil {
		dispatchFn = func() error { return extra.run(ctx, app, s, getenv, log, stdout) }
	}
	if err := dispatchFn(); err != nil {
		if refusal(err) {
			fmt.Fprintln(stderr, "euterpe-central:", err)
			return 2
		}
		log.Error("euterpe-central stopped", "command", cmd, "err", err)
		return 1
	}
	return 0
}

// refusal reports an error only the operator can end: a setting refused
// while the command ran, a keyring Postgres needs, state left in the
// former state directory. It exits 2, on which systemd does not restart
// the unit (RestartPreventExitStatus=2): restarting would only refuse again.
func refusal(err error) bool {
	var se *daemon.SettingError
	return errors.As(err, &se) || errors.Is(err, serve.ErrKeyringRequired) || errors.Is(err, serve.ErrFormerStateDir)
}

func dispatch(ctx context.Context, app *serve.App, cmd, sub string, s serve.Settings, name, keyID string,
	getenv func(string) string, log *slog.Logger, stdout io.Writer) error {
	switch {
	case cmd == "keys" && sub == "generate":
		if keyID == "" {
			keyID = "kek-" + strings.ToLower(daemon.BootID()[:8])
		}
		fmt.Fprintf(stdout, "%s:%s\n", keyID, credentialsNewKey())
		return nil
	case cmd == "serve":
		sctx, stop := daemon.SignalContext(ctx)
		defer stop()
		d, closeFn, err := app.Open(sctx, s, log, getenv)
		if err != nil {
			return err
		}
		defer closeFn()
		return app.Serve(sctx, s, d)
	case cmd == "migrate":
		d, closeFn, err := app.Open(ctx, s, log, getenv)
		if err != nil {
			return err
		}
		closeFn()
		log.Info("database is up to date", "engine", string(d.DB.Engine))
		return nil
	case cmd == "requester" && sub == "create":
		if strings.TrimSpace(name) == "" {
			return &daemon.SettingError{Setting: "-name", Value: name, Reason: "is required"}
		}
		d, closeFn, err := app.Open(ctx, s, log, getenv)
		if err != nil {
			return err
		}
		defer closeFn()
		created, err := d.Requesters.Create(ctx, name)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		return enc.Encode(created)
	case cmd == "keys" && sub == "rewrap":
		d, closeFn, err := app.Open(ctx, s, log, getenv)
		if err != nil {
			return err
		}
		defer closeFn()
		return rewrapKeys(ctx, d, log, stdout)
	}
	return &daemon.SettingError{Setting: "command", Value: strings.TrimSpace(cmd + " " + sub), Reason: "unknown command (see euterpe-central help)"}
}
