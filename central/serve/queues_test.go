package serve_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestLeaseSpecContradictingMachineStopsServe: a lease spec whose claim or
// hook-less reclaim its state machine forbids (here made so by editing the
// schema's spec or transition table) stops serve at Open with an error
// naming the move, before the database is migrated.
func TestLeaseSpecContradictingMachineStopsServe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func()
		want  string
	}{
		{"inbox claim", func() { schema.InboxLease.Claimed = schema.StatusFetching }, "claim queued -> fetching"},
		{"outbox reclaim", func() {
			schema.OutboxTransitions = lease.Transitions{Machine: schema.OutboxTransitions.Machine, Terminal: schema.OutboxTransitions.Terminal,
				Allowed: map[string][]string{schema.OutboxPending: {schema.OutboxDelivering}, schema.OutboxDelivering: {schema.OutboxDelivered}}}
		}, "reclaim delivering -> pending"},
	} {
		for _, engine := range sqltest.Engines {
			t.Run(tc.name+"/"+string(engine), func(t *testing.T) {
				inboxLease, outboxMachine := schema.InboxLease, schema.OutboxTransitions
				t.Cleanup(func() { schema.InboxLease, schema.OutboxTransitions = inboxLease, outboxMachine })
				tc.spoil()

				env := serveEnv(t, engine, nil)
				s, err := parseSettings(env)
				if err != nil {
					t.Fatal(err)
				}
				log, _ := daemon.NewLogger(&testsvc.LogBuffer{}, "info")
				_, _, err = serve.NewApp().Open(context.Background(), s, log, func(k string) string { return env[k] })
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, lease.ErrInvalidTransition) {
					t.Fatalf("Open: %v, want an invalid transition naming %q", err, tc.want)
				}
				db, err := sqldb.Open(context.Background(), env["EUTERPE_DATABASE_URL"], "")
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				var n int
				q := `SELECT COUNT(*) FROM sqlite_master WHERE name = 'euterpe_schema_versions'`
				if engine == sqldb.Postgres {
					q = `SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'euterpe_schema_versions'`
				}
				if err := db.QueryRow(q).Scan(&n); err != nil || n != 0 {
					t.Fatalf("the database was migrated before the queues were checked (%d, %v)", n, err)
				}
			})
		}
	}
}
