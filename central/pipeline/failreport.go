package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// failure is what a recorded job failure reports once the transaction that
// wrote it committed: its metrics and its log line. Reporting inside the
// transaction would count a failure twice when DB.Tx runs the transaction
// again (a Postgres serialization failure or deadlock), and count one that
// was never written when the commit fails.
type failure struct {
	msg    JobMessage
	status string // where the failure left the job
	err    *JobError
	out    Outcome
	at     time.Time
	delay  time.Duration // before a retry is visible
}

// reportFailure counts and logs a committed failure.
func (s *Store) reportFailure(r failure) {
	s.Metrics.failed(r.msg, r.err.Code, r.status, r.at)
	lg := s.logJob(r.msg, r.status, r.err)
	switch {
	case r.out == OutcomeDeadLetter:
		lg.Error("pipeline job dead-lettered", "alert", true)
	case Alert[r.err.Code]:
		lg.Error("pipeline job failed", "alert", true)
	case r.out == OutcomeRetry:
		lg.Warn("pipeline job failed; retrying", "visible_in", r.delay.String())
	default:
		lg.Warn("pipeline job failed")
	}
}

// lostLeases gathers the failures onExpire records for expired leases in
// one run of a claim (or reclaim) transaction, for the caller to report
// after the commit. The lease queue calls onExpire inside its transaction
// with the caller's context, which is how onExpire finds it.
type lostLeases struct {
	tx    *sql.Tx
	fails []failure
}

type lostLeasesKey struct{}

// errNoLostLeases refuses to recover expired leases where nothing would
// report their failures: through the lease queue directly instead of
// Store.Claim or Store.Reclaim.
var errNoLostLeases = errors.New("pipeline: expired leases are recovered through Store.Claim or Store.Reclaim")

func withLostLeases(ctx context.Context, l *lostLeases) context.Context {
	return context.WithValue(ctx, lostLeasesKey{}, l)
}

// begin starts a run of the transaction tx, dropping what an earlier run
// (rolled back) gathered.
func (l *lostLeases) begin(tx *sql.Tx) { l.tx, l.fails = tx, nil }

// add gathers a failure recorded in tx; a transaction other than the last
// one seen is a new run, and what the earlier run gathered was rolled back.
func (l *lostLeases) add(tx *sql.Tx, r failure) {
	if l.tx != tx {
		l.begin(tx)
	}
	l.fails = append(l.fails, r)
}

func (l *lostLeases) report(s *Store) {
	for _, r := range l.fails {
		s.reportFailure(r)
	}
}
