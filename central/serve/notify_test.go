package serve_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// slowStop is a role that, asked to stop, holds on until released: a
// runner finishing its in-flight transcode within the grace.
type slowStop struct{ release chan struct{} }

func (*slowStop) Name() string { return "slowstop" }
func (r *slowStop) Run(ctx context.Context) error {
	<-ctx.Done()
	<-r.release
	return nil
}

// TestStoppingIsSaidWhenShutdownBegins: STOPPING=1 tells systemd the stop
// has begun (systemctl status shows "deactivating" and the watchdog no
// longer applies); it is sent as soon as serve's context ends, not once
// every role has finished its work, which can take the whole grace.
func TestStoppingIsSaidWhenShutdownBegins(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	notes := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(notes)
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				notes <- line
			}
		}
	}()
	wait := func(want string) bool {
		deadline := time.After(5 * time.Second)
		for {
			select {
			case n, ok := <-notes:
				if !ok {
					return false
				}
				if n == want {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}

	role := &slowStop{release: make(chan struct{})}
	app := serve.NewApp()
	app.Register(serve.Definition{Name: "slowstop", New: func(*serve.Deps) (serve.Role, error) { return role, nil }})
	env := serveEnv(t, sqldb.SQLite, map[string]string{"EUTERPE_CENTRAL_ROLES": "slowstop"})
	cfg := daemon.NewConfig("euterpe-central serve", func(k string) string { return env[k] })
	var s serve.Settings
	app.Bind(cfg, &s)
	if err := cfg.Parse(nil); err != nil {
		t.Fatal(err)
	}
	log, err := daemon.NewLogger(&testsvc.LogBuffer{}, s.LogLevel)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, closeDB, err := app.Open(ctx, s, log, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, s, d) }()
	if !wait("READY=1") {
		t.Fatal("no READY=1")
	}
	cancel()
	stopping := wait("STOPPING=1")
	close(role.release)
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if !stopping {
		t.Fatal("no STOPPING=1 while a role was still finishing its work")
	}
}
