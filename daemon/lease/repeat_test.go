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

// TestBatchNamingARowTwiceIsRefused: a MoveEach or MoveMany batch that names
// one row twice (the same *Claim, or two Claims with one ID) is refused with
// ErrRepeatedClaim before anything is written, on both engines alike. Run
// step by step (SQLite) the second step saw the first's new status; grouped
// (Postgres) every step was checked against the first status, so one engine
// moved a row twice where the other refused the move or reported it stale.
func TestBatchNamingARowTwiceIsRefused(t *testing.T) {
	// Each case gets a claim c, a copy of it (same row), and another claim
	// o of its own row; o's step shows that nothing else is written either.
	type claims struct{ c, copy, o *lease.Claim }
	tests := []struct {
		name  string
		steps func(cl claims) []lease.Step // MoveEach
		many  func(cl claims) []*lease.Claim
	}{
		{name: "same claim twice in one group", steps: func(cl claims) []lease.Step {
			return []lease.Step{{Claim: cl.o, To: "busy"}, {Claim: cl.c, To: "busy", Set: "note = ?", Args: []any{"x"}},
				{Claim: cl.c, To: "busy", Set: "note = ?", Args: []any{"y"}}}
		}},
		{name: "same claim along two groups", steps: func(cl claims) []lease.Step {
			return []lease.Step{{Claim: cl.o, To: "busy"}, {Claim: cl.c, To: "busy"}, {Claim: cl.c, To: "done"}}
		}},
		{name: "same claim back and on", steps: func(cl claims) []lease.Step {
			return []lease.Step{{Claim: cl.o, To: "busy"}, {Claim: cl.c, To: "ready"}, {Claim: cl.c, To: "busy"}}
		}},
		{name: "two claims of one row in one group", steps: func(cl claims) []lease.Step {
			return []lease.Step{{Claim: cl.o, To: "busy"}, {Claim: cl.c, To: "busy", Set: "note = ?", Args: []any{"x"}},
				{Claim: cl.copy, To: "busy", Set: "note = ?", Args: []any{"y"}}}
		}},
		{name: "two claims of one row in two groups", steps: func(cl claims) []lease.Step {
			return []lease.Step{{Claim: cl.o, To: "busy"}, {Claim: cl.c, To: "busy"}, {Claim: cl.copy, To: "ready"}}
		}},
		{name: "MoveMany: same claim twice", many: func(cl claims) []*lease.Claim {
			return []*lease.Claim{cl.o, cl.c, cl.c}
		}},
		{name: "MoveMany: two claims of one row", many: func(cl claims) []*lease.Claim {
			return []*lease.Claim{cl.o, cl.c, cl.copy}
		}},
	}
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		q, clk, cs := setupClaimed(t, db, 2*len(tests))
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				c, o := &cs[2*i], &cs[2*i+1]
				cp := *c
				cl := claims{c: c, copy: &cp, o: o}
				// No transaction: whatever a statement wrote would stay.
				var err error
				if tc.many != nil {
					_, err = q.MoveMany(ctx, db, tc.many(cl), []string{"busy"}, clk.now(), "note = ?", "many")
				} else {
					_, err = q.MoveEach(ctx, db, tc.steps(cl), clk.now())
				}
				if !errors.Is(err, lease.ErrRepeatedClaim) {
					t.Errorf("err %v, want ErrRepeatedClaim", err)
				}
				if err != nil && len(err.Error()) > 512 {
					t.Errorf("error of %d characters", len(err.Error()))
				}
				for _, x := range []*lease.Claim{c, &cp, o} {
					if x.Status != "taken" || x.Seq != 1 {
						t.Errorf("claim %s moved in memory: %s seq %d", x.ID, x.Status, x.Seq)
					}
				}
				// Refused before any statement: the rows are as claimed.
				for _, id := range []string{c.ID, o.ID} {
					var status string
					var seq int64
					var note sql.NullString
					if err := db.QueryRow(db.Rebind(`SELECT status, seq, note FROM work WHERE id = ?`), id).Scan(&status, &seq, &note); err != nil {
						t.Fatal(err)
					}
					if status != "taken" || seq != 1 || note.Valid {
						t.Errorf("row %s written: %s seq %d note %v", id, status, seq, note)
					}
				}
			})
		}
	})
}

// setupClaimed is setup with its n rows claimed at once by one worker.
func setupClaimed(t *testing.T, db *sqldb.DB, n int) (*lease.Queue, *clock, []lease.Claim) {
	t.Helper()
	q, clk := setup(t, db, n)
	cs, err := q.Claim(context.Background(), "w", n, time.Minute)
	if err != nil || len(cs) != n {
		t.Fatalf("claim: %d %v", len(cs), err)
	}
	return q, clk, cs
}
