// Package servetest runs euterpe-central's serve composition inside a test
// process, the way the program does: settings parsed from an environment
// map and arguments, the program's logger, the database opened and
// migrated, every enabled role running until the test ends.
package servetest

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

var listening = regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)

// Started is a running serve.
type Started struct {
	Base string // http://host:port of the API
	Deps *serve.Deps
	Logs *testsvc.LogBuffer
}

// Start parses app's settings from env and args, opens the database and
// runs serve until the test ends; it returns once the API listens.
func Start(t testing.TB, app *serve.App, env map[string]string, args []string) *Started {
	t.Helper()
	getenv := func(k string) string { return env[k] }
	cfg := daemon.NewConfig("euterpe-central serve", getenv)
	var s serve.Settings
	app.Bind(cfg, &s)
	if err := cfg.Parse(args); err != nil {
		t.Fatal(err)
	}
	logs := &testsvc.LogBuffer{}
	// The program's logger (JSON, EUTERPE_LOG_LEVEL, redaction), as main builds it.
	log, err := daemon.NewLogger(logs, s.LogLevel)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, closeDB, err := app.Open(ctx, s, log, getenv)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, s, d) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		closeDB()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			return &Started{Base: "http://" + m[1], Deps: d, Logs: logs}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not listen: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
