package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
		// ttl is the later event's delivery lease.
		ttl time.Duration
	}{
		{"delivered", func(t *testing.T, st *Store, e *Event) {
			require.NoError(t, st.Delivered(context.Background(), e, 200))
		}, time.Minute},
		{"retried", func(t *testing.T, st *Store, e *Event) {
			require.NoError(t, st.Retry(context.Background(), e, st.Now(), 500, "server error"))
		}, time.Minute},
		{"lease expired", func(t *testing.T, st *Store, e *Event) {
			time.Sleep(300 * time.Millisecond)
		}, 200 * time.Millisecond},
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

				got, err = st.Claim(ctx, "w1", 10, tc.ttl)
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
