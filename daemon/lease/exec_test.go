package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestExecNeedsALeasedRow: a Move keeps claim_version, so a worker's own
// move to a terminal status, or its hand-back to the ready status, leaves
// its claim's version matching the row. Exec must still refuse the write
// (StaleError) once the row is no longer leased, as Heartbeat does: a late
// write must not land on a finished or requeued row.
func TestExecNeedsALeasedRow(t *testing.T) {
	tests := []struct {
		name  string
		path  []string // moves by the claim's own worker before the write
		stale bool
	}{
		{"claimed", nil, false},
		{"busy", []string{"busy"}, false},
		{"finished", []string{"busy", "done"}, true},
		{"handed back", []string{"busy", "ready"}, true},
	}
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		q, clk := setup(t, db, len(tests))
		cs, err := q.Claim(ctx, "w", len(tests), time.Minute)
		if err != nil || len(cs) != len(tests) {
			t.Fatalf("claim: %d %v", len(cs), err)
		}
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c := &cs[i]
				version := c.Version
				for _, to := range tc.path {
					if err := db.Tx(ctx, func(tx *sql.Tx) error { return q.Move(ctx, tx, c, to, clk.now(), "") }); err != nil {
						t.Fatal(err)
					}
				}
				var v int64
				if err := db.QueryRow(db.Rebind(`SELECT claim_version FROM work WHERE id = ?`), c.ID).Scan(&v); err != nil || v != version {
					t.Fatalf("claim_version %d after the moves, claimed at %d (%v)", v, version, err)
				}
				err := db.Tx(ctx, func(tx *sql.Tx) error { return q.Exec(ctx, tx, c, "note = ?", "late") })
				var se *lease.StaleError
				if got := errors.As(err, &se) && errors.Is(err, lease.ErrStale); got != tc.stale {
					t.Fatalf("exec: %v, stale want %v", err, tc.stale)
				}
				if !tc.stale && err != nil {
					t.Fatal(err)
				}
				var note sql.NullString
				if err := db.QueryRow(db.Rebind(`SELECT note FROM work WHERE id = ?`), c.ID).Scan(&note); err != nil {
					t.Fatal(err)
				}
				if note.Valid == tc.stale {
					t.Errorf("note %v after exec (stale %v)", note, tc.stale)
				}
			})
		}
	})
}

// TestOnlyAClaimTakesARowIntoClaimed: a worker that handed its row back to
// the ready status keeps its claim_version, and the machine allows ready ->
// claimed, so a move by that worker used to match: the row became claimed
// under no lease (the hand-back had cleared it), where no reclaim finds it.
// Only a claim, which grants a lease and a new version, may make that move.
func TestOnlyAClaimTakesARowIntoClaimed(t *testing.T) {
	tests := []struct {
		name  string
		write func(ctx context.Context, q *lease.Queue, tx *sql.Tx, c *lease.Claim, now time.Time) error
	}{
		{"Move", func(ctx context.Context, q *lease.Queue, tx *sql.Tx, c *lease.Claim, now time.Time) error {
			return q.Move(ctx, tx, c, "taken", now, "")
		}},
		{"MoveEach", func(ctx context.Context, q *lease.Queue, tx *sql.Tx, c *lease.Claim, now time.Time) error {
			_, err := q.MoveEach(ctx, tx, []lease.Step{{Claim: c, To: "taken"}}, now)
			return err
		}},
		{"MoveMany", func(ctx context.Context, q *lease.Queue, tx *sql.Tx, c *lease.Claim, now time.Time) error {
			_, err := q.MoveMany(ctx, tx, []*lease.Claim{c}, []string{"taken"}, now, "")
			return err
		}},
	}
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		q, clk := setup(t, db, len(tests))
		cs, err := q.Claim(ctx, "w", len(tests), time.Minute)
		if err != nil || len(cs) != len(tests) {
			t.Fatalf("claim: %d %v", len(cs), err)
		}
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c := &cs[i]
				err := db.Tx(ctx, func(tx *sql.Tx) error {
					return q.Move(ctx, tx, c, "ready", clk.now(), "worker_id = NULL, lease_expires_at = NULL")
				})
				if err != nil {
					t.Fatal(err)
				}
				err = db.Tx(ctx, func(tx *sql.Tx) error { return tc.write(ctx, q, tx, c, clk.now()) })
				var te *lease.TransitionError
				if !errors.As(err, &te) || !errors.Is(err, lease.ErrInvalidTransition) || te.From != "ready" || te.To != "taken" {
					t.Fatalf("ready -> taken by the former holder: %v", err)
				}
				var status string
				if err := db.QueryRow(db.Rebind(`SELECT status FROM work WHERE id = ?`), c.ID).Scan(&status); err != nil || status != "ready" || c.Status != "ready" {
					t.Fatalf("row %s, claim %s (%v)", status, c.Status, err)
				}
			})
		}
		// A claim still takes the handed-back rows.
		again, err := q.Claim(ctx, "w2", len(tests), time.Minute)
		if err != nil || len(again) != len(tests) {
			t.Fatalf("claim again: %d %v", len(again), err)
		}
	})
}
