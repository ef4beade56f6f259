package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestSpecCheckedAgainstMachine: the claim (Ready → Claimed) and the
// hook-less reclaim (each Leased status → Requeue) write status in SQL
// built once, without Move; a Spec whose moves its Machine forbids is
// reported by Validate, and every claim, heartbeat and reclaim returns that
// error and writes nothing.
func TestSpecCheckedAgainstMachine(t *testing.T) {
	noHook := func(context.Context, *sql.Tx, []lease.Claim, time.Time) error { return nil }
	without := func(from, to string) lease.Transitions {
		m := lease.Transitions{Machine: machine.Machine, Terminal: machine.Terminal, Allowed: map[string][]string{}}
		for f, tos := range machine.Allowed {
			for _, s := range tos {
				if f != from || s != to {
					m.Allowed[f] = append(m.Allowed[f], s)
				}
			}
		}
		return m
	}
	otherRequeue := spec
	otherRequeue.Requeue = "done"
	noRequeue := spec
	noRequeue.Requeue = ""
	noLeased := spec
	noLeased.Leased = nil
	cases := []struct {
		name    string
		spec    lease.Spec
		machine lease.Transitions
		expire  func(context.Context, *sql.Tx, []lease.Claim, time.Time) error
		want    string // "" = valid
		machErr bool   // the error wraps a *TransitionError
	}{
		{"valid", spec, machine, nil, "", false},
		{"claim forbidden", spec, without("ready", "taken"), nil, "claim ready -> taken", true},
		{"reclaim forbidden", spec, without("busy", "ready"), nil, "reclaim busy -> ready", true},
		{"reclaim to a terminal state", otherRequeue, machine, nil, "reclaim taken -> done", true},
		{"reclaim forbidden but a hook moves rows", spec, without("busy", "ready"), noHook, "", false},
		{"no requeue without a hook", noRequeue, machine, nil, "Spec.Requeue is required", false},
		{"no leased statuses", noLeased, machine, nil, "needs Ready, Claimed and Leased", false},
	}
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if _, err := db.Exec(`DELETE FROM work`); err != nil {
					t.Fatal(err)
				}
				q, _ := setup(t, db, 2)
				q.Spec, q.Machine, q.OnExpire = tc.spec, tc.machine, tc.expire
				err := q.Validate()
				if tc.want == "" {
					if err != nil {
						t.Fatalf("Validate: %v", err)
					}
					if _, err := q.Claim(context.Background(), "w", 1, time.Minute); err != nil {
						t.Fatalf("claim on a valid spec: %v", err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "queue work") {
					t.Fatalf("Validate: %v, want an error naming the queue and %q", err, tc.want)
				}
				if got := errors.Is(err, lease.ErrInvalidTransition); got != tc.machErr {
					t.Fatalf("errors.Is(err, ErrInvalidTransition) = %v: %v", got, err)
				}
				for _, use := range []struct {
					name string
					fn   func() error
				}{
					{"Claim", func() error { _, err := q.Claim(context.Background(), "w", 1, time.Minute); return err }},
					{"ClaimTx", func() error {
						return db.Tx(context.Background(), func(tx *sql.Tx) error {
							_, err := q.ClaimTx(context.Background(), tx, "w", 1, time.Minute, time.Now())
							return err
						})
					}},
					{"Reclaim", func() error { _, err := q.Reclaim(context.Background(), 1); return err }},
					{"Heartbeat", func() error { return q.Heartbeat(context.Background(), &lease.Claim{ID: "w0000"}, time.Minute) }},
				} {
					if got := use.fn(); got == nil || got.Error() != err.Error() {
						t.Fatalf("%s on a bad spec: %v, want %q", use.name, got, err)
					}
				}
				var claimed int
				if err := db.QueryRow(`SELECT COUNT(*) FROM work WHERE status <> 'ready' OR claim_version <> 0`).Scan(&claimed); err != nil || claimed != 0 {
					t.Fatalf("a bad spec wrote %d rows (%v)", claimed, err)
				}
			})
		}
	})
}
