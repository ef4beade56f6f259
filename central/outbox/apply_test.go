package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestBatchWithTwoOutcomesOfOneEvent: a recorder batch can carry two
// outcomes of one event, the lost attempt's (its lease expired while it
// sent) and the live claim's. MoveEach refuses a batch naming a row twice,
// so Apply writes it op by op: the lost attempt is stale, the live outcome
// written, in either order, and the other ops of the batch are written too.
func TestBatchWithTwoOutcomesOfOneEvent(t *testing.T) {
	for _, liveFirst := range []bool{false, true} {
		name := "lost attempt first"
		if liveFirst {
			name = "live claim first"
		}
		t.Run(name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				f := newFixture(t, db)
				st := NewStore(db, nil)
				id := f.addEvent(t, "job_a_"+f.req, 1, "http://127.0.0.1:9/hook")
				other := f.addEvent(t, "job_b_"+f.req, 1, "http://127.0.0.1:9/hook")

				lost, err := st.Claim(ctx, "w1", 1, 50*time.Millisecond)
				if err != nil || len(lost) != 1 || lost[0].ID != id {
					t.Fatalf("first claim: %v %v", lost, err)
				}
				time.Sleep(100 * time.Millisecond) // the lease runs out
				live, err := st.Claim(ctx, "w2", 2, time.Minute)
				if err != nil || len(live) != 2 {
					t.Fatalf("second claim: %d events, %v", len(live), err)
				}
				if live[0].ID != id {
					live[0], live[1] = live[1], live[0]
				}
				if live[0].ID != id || live[0].Version <= lost[0].Version {
					t.Fatalf("the second claim did not take the event over: %+v", live[0].Claim)
				}

				ops := []Op{
					st.RetryOp(lost[0], st.Now().Add(time.Hour), 500, "lost attempt"),
					st.DeliveredOp(live[0], 200),
					st.DeliveredOp(live[1], 201),
				}
				staleAt, liveAt := 0, 1
				if liveFirst {
					ops[0], ops[1] = ops[1], ops[0]
					staleAt, liveAt = 1, 0
				}
				out := st.Apply(ctx, ops)
				if len(out) != len(ops) {
					t.Fatalf("%d results for %d ops", len(out), len(ops))
				}
				if !errors.Is(out[staleAt], lease.ErrStale) {
					t.Errorf("the lost attempt's outcome: %v, want stale", out[staleAt])
				}
				if out[liveAt] != nil || out[2] != nil {
					t.Errorf("live outcomes: %v, %v", out[liveAt], out[2])
				}
				for _, c := range []struct {
					id   string
					code int
				}{{id, 200}, {other, 201}} {
					r := f.row(t, c.id)
					if r.Status != schema.OutboxDelivered || r.Code == nil || *r.Code != c.code || r.LastErr != nil {
						t.Errorf("event %s: %+v, want delivered with %d", c.id, r, c.code)
					}
				}
				if lost[0].Status != schema.OutboxDelivering || live[0].Status != schema.OutboxDelivered {
					t.Errorf("in memory: lost attempt %s, live claim %s", lost[0].Status, live[0].Status)
				}
			})
		})
	}
}

// TestFirstApplyDoesNotWaitForItsOwnConnection: a store's first reading of
// the clock measures the database clock on a connection of its own. Made
// inside Apply's transaction on a pool that transaction exhausts (one
// connection here), it waited for the transaction's own connection until
// the measurement gave up (5 s). An outcome whose Op read no clock (a
// retry at a time the caller chose) is the first reading.
func TestFirstApplyDoesNotWaitForItsOwnConnection(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db)
		id := f.addEvent(t, "job_"+f.req, 1, "http://127.0.0.1:9/hook")
		got, err := NewStore(db, nil).Claim(ctx, "w1", 1, time.Minute)
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %v %v", got, err)
		}
		if db.Engine == sqldb.Postgres {
			// SQLite's clock is read without a connection (sqldb.DB.ClockOn).
			db.SetMaxOpenConns(1)
			defer db.SetMaxOpenConns(0)
		}
		st := NewStore(db, nil) // its clock never measured
		start := time.Now()
		err = st.Apply(ctx, []Op{st.RetryOp(got[0], time.Now().Add(time.Hour), 500, "server error")})[0]
		// Waiting for its own connection, it gives up after 5 s.
		if took := time.Since(start); took > 4*time.Second {
			t.Fatalf("the first Apply of a store took %v: it measured the clock inside its transaction", took)
		}
		if err != nil {
			t.Fatal(err)
		}
		if r := f.row(t, id); r.Status != schema.OutboxPending {
			t.Fatalf("event after the retry: %+v", r)
		}
	})
}
