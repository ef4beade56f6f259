package serve

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

func TestStopDeadline(t *testing.T) {
	for _, tt := range []struct{ grace, want time.Duration }{
		{0, 55 * time.Second},
		{20 * time.Second, 55 * time.Second}, // the default: within TimeoutStopSec=60s
		{50 * time.Second, 55 * time.Second},
		{2 * time.Minute, 2*time.Minute + 5*time.Second},
	} {
		if got := stopDeadline(tt.grace); got != tt.want {
			t.Errorf("stopDeadline(%s) = %s, want %s", tt.grace, got, tt.want)
		}
	}
}

// hangingRole ignores the stop and keeps a database connection, as a role
// stuck in a call that does not heed its context.
type hangingRole struct {
	db      *sqldb.DB
	running chan struct{}
	release chan struct{}
}

func (*hangingRole) Name() string { return "hanging" }

func (r *hangingRole) Run(context.Context) error {
	conn, err := r.db.DB.Conn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	close(r.running)
	<-r.release
	return nil
}

// A role that does not return after the stop began is named, serve
// returns an error instead of waiting for it, and closing the database it
// holds a connection of gives up in time.
func TestServeNamesARoleThatDoesNotStop(t *testing.T) {
	savedWindDown, savedMargin, savedClose := roleWindDown, stopMargin, dbCloseWait
	roleWindDown, stopMargin, dbCloseWait = 0, 300*time.Millisecond, 500*time.Millisecond
	t.Cleanup(func() { roleWindDown, stopMargin, dbCloseWait = savedWindDown, savedMargin, savedClose })
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			env := map[string]string{
				"EUTERPE_DATABASE_URL":   sqltest.URL(t, engine),
				"EUTERPE_STATE_DIR":      t.TempDir(),
				"EUTERPE_KEYRING":        "k1:" + credentials.NewKey(),
				"EUTERPE_CENTRAL_ROLES":  "hanging",
				"EUTERPE_SHUTDOWN_GRACE": "0s",
			}
			getenv := func(k string) string { return env[k] }
			role := &hangingRole{running: make(chan struct{}), release: make(chan struct{})}
			t.Cleanup(func() { close(role.release) })
			app := NewApp()
			app.Register(Definition{Name: "hanging", New: func(d *Deps) (Role, error) {
				role.db = d.DB
				return role, nil
			}})
			cfg := daemon.NewConfig("euterpe-central serve", getenv)
			var s Settings
			app.Bind(cfg, &s)
			if err := cfg.Parse(nil); err != nil {
				t.Fatal(err)
			}
			logs := &testsvc.LogBuffer{}
			log, err := daemon.NewLogger(logs, "info")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d, closeFn, err := app.Open(ctx, s, log, getenv)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- app.Serve(ctx, s, d) }()
			select {
			case <-role.running:
			case <-time.After(10 * time.Second):
				t.Fatal("the role never ran")
			}
			cancel()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "hanging") {
					t.Fatalf("serve returned %v, want an error naming the role", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("serve waited for a role that does not stop")
			}
			if !strings.Contains(logs.String(), `"roles":"hanging"`) {
				t.Errorf("the log does not name the role:\n%s", logs)
			}
			closed := make(chan struct{})
			go func() { closeFn(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(dbCloseWait + 5*time.Second):
				t.Fatal("closing the database waited on the role's connection")
			}
		})
	}
}
