package outbox

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// When the delivery of a job's event ends, however it ends, the job's event
// that was waiting behind it (one event of a job in flight at a time) is
// claimed at once, not at the next poll: here the poll is far longer than
// the bound. Cases: a redriven earlier event waiting for the later one in
// flight (which is delivered, retried or dead-lettered), and the job's next
// event waiting for a delivered one.
func TestJobsNextEventClaimedPromptly(t *testing.T) {
	const bound = 2 * time.Second
	cases := []struct {
		name string
		// redrive: the earlier event is dead and redriven while the later
		// one is in flight; otherwise the earlier one is in flight and the
		// later one waits.
		redrive bool
		code    int // the in-flight event's answer
	}{
		{"redriven behind a delivered event", true, http.StatusNoContent},
		{"redriven behind a retried event", true, http.StatusInternalServerError},
		{"redriven behind a dead-lettered event", true, http.StatusGone},
		{"next event behind a delivered event", false, http.StatusNoContent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				f := newFixture(t, db)
				job := "job_" + f.req
				release := make(chan struct{})
				var inFlight, waiting string
				answered := make(chan time.Time, 1)
				rc := newReceiver(t, func(n int, r *http.Request, _ []byte) int {
					if r.Header.Get(webhook.HeaderEventID) != inFlight {
						return http.StatusNoContent
					}
					<-release
					answered <- time.Now()
					return tc.code
				})
				first := f.addEvent(t, job, 1, rc.URL)
				second := f.addEvent(t, job, 2, rc.URL)
				inFlight, waiting = first, second
				if tc.redrive {
					inFlight, waiting = second, first
					_, err := db.ExecContext(ctx, db.Rebind(`UPDATE job_outbox_events SET status = 'dead_letter', dead_lettered_at = ? WHERE event_id = ?`),
						sqldb.Micros(time.Now()), first)
					require.NoError(t, err)
				}
				cfg := testConfig()
				cfg.PollMin, cfg.PollMax = time.Minute, time.Minute
				// A retried event stays out of the way.
				cfg.BackoffBase, cfg.BackoffMax = time.Hour, time.Hour
				f.start(t, cfg, "w1")

				waitFor(t, "the in-flight event's request", 10*time.Second, func() bool { return len(rc.receipts()) == 1 })
				if tc.redrive {
					st := NewStore(db, nil)
					n, err := st.Redrive(ctx, RedriveFilter{EventIDs: []string{first}})
					require.NoError(t, err)
					require.EqualValues(t, 1, n)
					// The redrive's own wake-up finds the job's event in
					// flight: nothing is claimable yet.
					time.Sleep(200 * time.Millisecond)
					require.Len(t, rc.receipts(), 1, "claimed beside the job's event in flight")
				}
				close(release)
				at := <-answered
				waitFor(t, "the waiting event's request", 10*time.Second, func() bool { return len(rc.receipts()) == 2 })
				got := rc.receipts()[1]
				require.Equal(t, waiting, got.Header.Get(webhook.HeaderEventID))
				require.Less(t, got.At.Sub(at), bound, "the waiting event waited for a poll (%v)", cfg.PollMin)
				require.Zero(t, rc.overlap)
			})
		})
	}
}

// An event committed by a pod whose estimate of the database clock runs
// ahead of this one's is not due yet when its wake-up arrives: it is
// claimed when it is due by this pod's clock, not at the next poll (here a
// minute away).
func TestWokenForAnEventNotYetDue(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusNoContent })
		cfg := testConfig()
		cfg.PollMin, cfg.PollMax = time.Minute, time.Minute
		d, _ := f.start(t, cfg, "w1")
		time.Sleep(200 * time.Millisecond) // past the first poll

		const ahead = 300 * time.Millisecond
		due := time.Now().Add(ahead)
		id := f.addEventAt(t, "evt_"+f.req, "job_"+f.req, 1, rc.URL, due)
		d.Wake() // as the commit's notification does
		waitFor(t, "the event's request", 5*time.Second, func() bool { return len(rc.receipts()) == 1 })
		got := rc.receipts()[0]
		require.Equal(t, id, got.Header.Get(webhook.HeaderEventID))
		require.False(t, got.At.Before(due.Add(-50*time.Millisecond)), "sent %s before it was due", due.Sub(got.At))
	})
}
