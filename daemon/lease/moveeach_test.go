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

// TestMoveEach writes mixed outcomes in one transaction: steps grouped by
// kind, per-step arguments (NULL in some steps, in all steps, bytes for a
// text column), a stale claim among them, and checks each row and claim.
func TestMoveEach(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		q, clk := setup(t, db, 6)
		cs, err := q.Claim(ctx, "w", 6, time.Minute)
		if err != nil || len(cs) != 6 {
			t.Fatalf("claim: %d %v", len(cs), err)
		}
		stale := cs[5] // fenced out by a later claim version
		if _, err := db.Exec(db.Rebind(`UPDATE work SET claim_version = claim_version + 1 WHERE id = ?`), stale.ID); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			claim *lease.Claim
			to    string
			set   string
			args  []any
			note  any // expected note; nil = NULL
			stale bool
		}{
			{&cs[0], "busy", "note = ?", []any{"a"}, "a", false},
			{&cs[1], "busy", "note = ?", []any{nil}, nil, false},                          // NULL among strings
			{&cs[2], "ready", "note = ?, ready_at = ?", []any{nil, int64(7)}, nil, false}, // NULL in every step of its group
			{&cs[3], "busy", "note = 'why?'", nil, "why?", false},                         // a ? inside a literal is no placeholder
			{&cs[4], "ready", "note = ?", []any{[]byte("b")}, "b", false},                 // bytes for a text column
			{&stale, "busy", "note = ?", []any{"s"}, nil, true},
		}
		steps := make([]lease.Step, len(tests))
		for i, tc := range tests {
			steps[i] = lease.Step{Claim: tc.claim, To: tc.to, Set: tc.set, Args: tc.args}
		}
		var out []error
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			var err error
			out, err = q.MoveEach(ctx, tx, steps, clk.now())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, tc := range tests {
			if got := errors.Is(out[i], lease.ErrStale); got != tc.stale {
				t.Errorf("step %d: stale %v, want %v (%v)", i, got, tc.stale, out[i])
			}
			var status string
			var note sql.NullString
			var seq int64
			if err := db.QueryRow(db.Rebind(`SELECT status, note, seq FROM work WHERE id = ?`), tc.claim.ID).Scan(&status, &note, &seq); err != nil {
				t.Fatal(err)
			}
			if tc.stale {
				if status != "taken" || tc.claim.Status != "taken" {
					t.Errorf("stale step %d moved: row %s, claim %s", i, status, tc.claim.Status)
				}
				continue
			}
			if status != tc.to || tc.claim.Status != tc.to || tc.claim.Seq != seq || seq != 2 {
				t.Errorf("step %d: row %s seq %d, claim %s seq %d, want %s seq 2", i, status, seq, tc.claim.Status, tc.claim.Seq, tc.to)
			}
			if want, _ := tc.note.(string); note.Valid != (tc.note != nil) || note.String != want {
				t.Errorf("step %d: note %v, want %v", i, note, tc.note)
			}
		}
		var ready int64
		_ = db.QueryRow(db.Rebind(`SELECT ready_at FROM work WHERE id = ?`), cs[2].ID).Scan(&ready)
		if ready != 7 {
			t.Errorf("ready_at %d, want 7", ready)
		}
		// A move the machine forbids fails the whole call.
		bad := cs[0] // now busy
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := q.MoveEach(ctx, tx, []lease.Step{{Claim: &bad, To: "taken"}}, clk.now())
			return err
		})
		if !errors.Is(err, lease.ErrInvalidTransition) {
			t.Fatalf("busy -> taken: %v", err)
		}
	})
}
