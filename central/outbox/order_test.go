package outbox

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A redriven event of a job waits while a later event of the same job is
// being delivered: at most one event of a job is in flight, whatever became
// of the earlier ones. Once the later event's delivery ends (delivered,
// retried, or its lease expired) the redriven one goes first.
func TestRedriveWaitsForTheJobsEventInFlight(t *testing.T) {
	cases := []struct {
		name string
		// end finishes the in-flight later event.
		end func(t *testing.T, st *Store, e *Event)
	}{
		{"delivered", func(t *testing.T, st *Store, e *Event) {
			require.NoError(t, st.Delivered(context.Background(), e, 200))
		}},
		{"retried", func(t *testing.T, st *Store, e *Event) {
			require.NoError(t, st.Retry(context.Background(), e, st.Now(), 500, "server error"))
		}},
		// The lease is moved into the past rather than waited out: a short
		// lease could run out on a stalled machine before the checks that
		// it still holds the redriven event back.
		{"lease expired", func(t *testing.T, st *Store, e *Event) {
			_, err := st.DB.ExecContext(context.Background(), st.DB.Rebind(
				`UPDATE job_outbox_events SET lease_expires_at = ? WHERE event_id = ?`),
				sqldb.Micros(st.Now().Add(-time.Second)), e.ID)
			require.NoError(t, err)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				f := newFixture(t, db)
				st := NewStore(db, nil)
				job := "job_" + f.req
				first := f.addEvent(t, job, 1, "http://127.0.0.1:9/hook")
				second := f.addEvent(t, job, 2, "http://127.0.0.1:9/hook")

				got, err := st.Claim(ctx, "w1", 10, time.Minute)
				require.NoError(t, err)
				require.Len(t, got, 1, "only the first event of a job is claimable")
				require.Equal(t, first, got[0].ID)
				require.NoError(t, st.DeadLetter(ctx, got[0], 410, "gone"))

				got, err = st.Claim(ctx, "w1", 10, time.Minute)
				require.NoError(t, err)
				require.Len(t, got, 1, "a dead letter does not hold the later event back")
				require.Equal(t, second, got[0].ID)
				inFlight := got[0]

				n, err := st.Redrive(ctx, RedriveFilter{EventIDs: []string{first}})
				require.NoError(t, err)
				require.EqualValues(t, 1, n)

				due, err := st.Due(ctx)
				require.NoError(t, err)
				require.False(t, due, "the redriven event is due while the job's later event is in flight")
				got, err = st.Claim(ctx, "w2", 10, time.Minute)
				require.NoError(t, err)
				require.Empty(t, got, "claimed beside the job's event in flight")

				tc.end(t, st, inFlight)

				got, err = st.Claim(ctx, "w2", 10, time.Minute)
				require.NoError(t, err)
				require.Len(t, got, 1, "one event of the job at a time")
				require.Equal(t, first, got[0].ID, "the redriven earlier event goes first")
				require.Equal(t, "delivering", f.row(t, first).Status)
			})
		})
	}
}

// A claim whose snapshot predates a redrive of the job's earlier event, and
// a second dispatcher's claim after that redrive (before the first commits),
// each see the job with no event in flight (Postgres, read committed): one
// takes the later event, the other the redriven earlier one. The claims
// that find another event of their job in flight once committed give
// theirs back, so at most one event of a job is ever being delivered.
func TestConcurrentRedriveNeverLeavesTwoInFlight(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db)
		job := "job_" + f.req
		first := f.addEvent(t, job, 1, "http://127.0.0.1:9/hook")
		second := f.addEvent(t, job, 2, "http://127.0.0.1:9/hook")
		_, err := db.ExecContext(ctx, db.Rebind(`UPDATE job_outbox_events SET status = 'dead_letter', dead_lettered_at = ? WHERE event_id = ?`),
			sqldb.Micros(time.Now()), first)
		require.NoError(t, err)

		a, b := NewStore(db, nil), NewStore(db, nil)
		// redriveAndClaim is the operator's redrive and a second
		// dispatcher's claim, run while the first claim is uncommitted
		// (Postgres) or after it (SQLite: the claim holds the one writer,
		// so nothing can interleave with it).
		var bGot []*Event
		redriveAndClaim := func() {
			n, err := b.Redrive(ctx, RedriveFilter{EventIDs: []string{first}})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			bGot, err = b.Claim(ctx, "w2", 10, time.Minute)
			require.NoError(t, err)
		}
		inTx, commit := make(chan struct{}), make(chan struct{})
		if db.Engine == sqldb.Postgres {
			a.q.OnClaim = func(context.Context, *sql.Tx, []lease.Claim, time.Time) error {
				close(inTx)
				<-commit
				return nil
			}
		}
		type result struct {
			events []*Event
			err    error
		}
		aDone := make(chan result, 1)
		go func() {
			evs, err := a.Claim(ctx, "w1", 10, time.Minute)
			aDone <- result{evs, err}
		}()
		if db.Engine == sqldb.Postgres {
			select {
			case <-inTx:
			case <-time.After(10 * time.Second):
				t.Fatal("the first claim never reached its hook")
			}
			redriveAndClaim()
			close(commit)
		}
		ar := <-aDone
		require.NoError(t, ar.err)
		if db.Engine == sqldb.SQLite {
			redriveAndClaim()
		}

		var delivering []string
		for _, id := range []string{first, second} {
			if f.row(t, id).Status == "delivering" {
				delivering = append(delivering, id)
			}
		}
		require.LessOrEqual(t, len(delivering), 1, "events of one job in flight at once: %v", delivering)
		require.LessOrEqual(t, len(ar.events)+len(bGot), 1, "claims returned for one job")
		for _, e := range append(ar.events, bGot...) {
			require.Equal(t, "delivering", f.row(t, e.ID).Status, "a returned claim was given back")
		}
	})
}

// When the check for another event of the job in flight fails after the
// claim committed, the events that could clash are given back rather than
// sent unchecked; a job's first event, never redriven, cannot clash and is
// sent.
func TestFailedInFlightCheckGivesBackWhatMayClash(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db)
		job := "job_" + f.req
		first := f.addEvent(t, job, 1, "http://127.0.0.1:9/hook")
		second := f.addEvent(t, job, 2, "http://127.0.0.1:9/hook")
		other := f.addEvent(t, "job_other_"+f.req, 1, "http://127.0.0.1:9/hook")
		_, err := db.ExecContext(ctx, db.Rebind(`UPDATE job_outbox_events SET status = 'dead_letter', dead_lettered_at = ? WHERE event_id = ?`),
			sqldb.Micros(time.Now()), first)
		require.NoError(t, err)

		st := NewStore(db, nil)
		checked := false
		st.inFlight = func(context.Context, []*Event) (map[string]bool, error) {
			checked = true
			return nil, errors.New("connection reset")
		}
		got, err := st.Claim(ctx, "w1", 10, time.Minute)
		require.NoError(t, err)
		var ids []string
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		if db.Engine == sqldb.SQLite {
			require.False(t, checked, "SQLite claims one at a time: nothing to check")
			require.ElementsMatch(t, []string{second, other}, ids)
			return
		}
		require.True(t, checked)
		require.Equal(t, []string{other}, ids, "only the event that cannot clash is sent")
		r := f.row(t, second)
		require.Equal(t, "pending", r.Status, "the unchecked later event is given back")
		require.Zero(t, r.Attempts, "giving back does not spend an attempt")
	})
}
