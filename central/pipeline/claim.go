package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Claim takes up to n visible jobs for worker under the visibility timeout
// ttl (a lease; the claim counts an attempt and is the contract's
// set_running: its time, updated_at, is the attempt's started_at). Expired
// leases are recovered first, in the same transaction, by onExpire; their
// failures are reported once the transaction committed.
func (s *Store) Claim(ctx context.Context, worker string, n int, ttl time.Duration) ([]*Job, error) {
	lost := &lostLeases{}
	var claims []lease.Claim
	// The first measurement of the database clock takes a connection of its
	// own and waits up to 5 s for one: taken inside the transaction, on a
	// pool the transactions have exhausted, it would wait for the
	// connection it holds itself (lease.Queue.Claim does the same).
	s.q.Time()
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		lost.begin(tx) // DB.Tx may run this again: only the last run commits
		var err error
		claims, err = s.q.ClaimTx(withLostLeases(ctx, lost), tx, worker, n, ttl, s.q.Time())
		return err
	})
	if err != nil {
		return nil, unavailable(CodeRepoUnavailable, fmt.Errorf("%s: claim: %w", s.q.Spec.Table, err))
	}
	lost.report(s)
	out := make([]*Job, 0, len(claims))
	for _, c := range claims {
		x := c.Extra
		c.Extra = nil
		j := &Job{Claim: c, Msg: JobMessage{JobID: c.ID, IdempotencyKey: *x[0].(*string), JobType: *x[1].(*string),
			Symbol: *x[2].(*string), Asof: *x[3].(*string), RequestedBy: *x[4].(*string),
			CreatedAt: sqldb.FromMicros(*x[5].(*int64)), Attempt: c.Attempt}}
		out = append(out, j)
	}
	return out, nil
}

// Reclaim recovers up to n jobs whose lease expired without claiming any (a
// sweeper's call: Claim recovers them itself) and returns how many it
// recovered.
func (s *Store) Reclaim(ctx context.Context, n int) (int, error) {
	lost := &lostLeases{}
	count, err := s.q.Reclaim(withLostLeases(ctx, lost), n)
	if err != nil {
		return 0, unavailable(CodeRepoUnavailable, err)
	}
	// The committed run recovered count leases; when it recovered some,
	// it was the last run of onExpire, whose failures lost holds.
	if count > 0 {
		lost.report(s)
	}
	return count, nil
}

// onExpire handles jobs whose worker stopped heartbeating: the failure is
// recorded (VISIBILITY_TIMEOUT at the attempt that was lost) and the
// message is visible again at once, or dead-lettered after max_attempts.
// It runs inside a transaction of Claim or Reclaim, which report the
// failures it gathers once that transaction committed.
func (s *Store) onExpire(ctx context.Context, tx *sql.Tx, expired []lease.Claim, now time.Time) error {
	lost, ok := ctx.Value(lostLeasesKey{}).(*lostLeases)
	if !ok {
		return errNoLostLeases
	}
	for i := range expired {
		c := expired[i]
		j := &Job{Claim: c}
		var maxAttempts int
		var created int64
		// created_at too: a job dead-lettered here ends, and its latency
		// (enqueue to its end) is measured from it.
		err := tx.QueryRowContext(ctx, s.DB.Rebind(`SELECT idempotency_key, job_type, symbol, asof, requested_by, created_at, max_attempts FROM pipeline_jobs WHERE job_id = ?`), c.ID).
			Scan(&j.Msg.IdempotencyKey, &j.Msg.JobType, &j.Msg.Symbol, &j.Msg.Asof, &j.Msg.RequestedBy, &created, &maxAttempts)
		if err != nil {
			return err
		}
		j.Msg.JobID, j.Msg.Attempt, j.Msg.CreatedAt = c.ID, c.Attempt, sqldb.FromMicros(created)
		f := Fail(CodeVisibilityTimeout, fmt.Sprintf("no heartbeat within the visibility timeout (attempt %d): the worker stopped", c.Attempt))
		r, err := s.failTx(ctx, tx, j, now, f, maxAttempts, 0)
		if err != nil {
			return err
		}
		lost.add(tx, r)
	}
	return nil
}

// Heartbeat extends j's visibility timeout; a *lease.StaleError means the
// message reappeared and another worker owns it now.
func (s *Store) Heartbeat(ctx context.Context, j *Job, ttl time.Duration) error {
	return s.q.Heartbeat(ctx, &j.Claim, ttl)
}

// Keep runs work under j's lease with heartbeats (lease.Keep), fenced at
// the end of the lease its claim or last heartbeat granted.
func (s *Store) Keep(ctx context.Context, j *Job, ttl time.Duration, work func(ctx context.Context) error) error {
	// The heartbeats run on other goroutines while work writes j (its
	// final write moves j.Claim, and restores it when that write fails):
	// they renew a copy of the claim, which needs only its id and fencing
	// token, both fixed for the whole run, and log what j was at the start.
	hb := lease.Claim{ID: j.ID, Version: j.Version, Status: j.Status, Worker: j.Worker}
	m, status := j.Msg, j.Status
	return lease.Keep(ctx, ttl, func(ctx context.Context) error { return s.q.Heartbeat(ctx, &hb, ttl) }, work,
		lease.OnRenewError(func(err error) {
			s.logJob(m, status, nil).Warn("pipeline heartbeat failed; retrying on the next beat", "err", Redact(err.Error()))
		}),
		lease.Until(j.Deadline))
}

// SetRunning restamps the attempt's start on j's row (the final write
// copies it to started_at). The claim itself moves queued → running and
// stamps it; this is for a caller that starts the work later, so j must be
// held running: any other status is a *lease.TransitionError (a queued job
// is started by a claim, never by this), and a row that is no longer
// running under j's claim — finished or put back in the queue through
// another copy of it — is a *lease.StaleError. The claim_version alone
// does not fence this: the final writes keep it.
func (s *Store) SetRunning(ctx context.Context, j *Job, startedAt time.Time) error {
	if j.Status != StatusRunning {
		return &lease.TransitionError{Machine: Transitions.Machine, From: j.Status, To: StatusRunning,
			Reason: "set_running restamps a claimed job; a claim starts a queued one"}
	}
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		res, err := s.DB.ExecTx(ctx, tx, "UPDATE pipeline_jobs SET updated_at = ? WHERE job_id = ? AND claim_version = ? AND status = ?",
			sqldb.Micros(startedAt), j.ID, j.Version, StatusRunning)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return &lease.StaleError{Table: Lease.Table, ID: j.ID, Version: j.Version}
		}
		return nil
	})
	if err != nil {
		return unavailable(CodeRepoUnavailable, err)
	}
	j.At = startedAt
	return nil
}

// notBefore is the finish time t for jobs, moved up to the latest attempt
// start among them. Starts are stamped by the lease's database-corrected
// clock; a finish may come from a caller's clock, and even the store's
// (the same lease clock) steps when it measures the database clock again:
// a job must never finish before it started.
func notBefore(t time.Time, jobs ...*Job) time.Time {
	for _, j := range jobs {
		if j.At.After(t) {
			t = j.At
		}
	}
	return t
}

const release = "worker_id = NULL, lease_expires_at = NULL"

// startedAt records the attempt's start in its final write: the claim
// stamped updated_at (heartbeats do not touch it), and a SET reads the
// row's old values. One row version fewer per job than a write at claim.
const startedAt = "started_at = updated_at, "

// SetSucceeded records success with the result reference (fenced),
// redacted (RedactRef: §8, no credentials in what is stored and returned).
func (s *Store) SetSucceeded(ctx context.Context, j *Job, finishedAt time.Time, resultRef string) error {
	finishedAt = notBefore(finishedAt, j)
	resultRef = RedactRef(resultRef)
	// Move advances j's claim inside the transaction; a transaction that
	// did not commit (or runs again) starts from the claim as it was.
	saved := j.Claim
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		j.Claim = saved
		return s.q.Move(ctx, tx, &j.Claim, StatusSucceeded, finishedAt, "finished_at = ?, result_ref = ?, "+startedAt+release,
			sqldb.Micros(finishedAt), nullString(resultRef))
	})
	if err != nil {
		j.Claim = saved
		return unavailable(CodeRepoUnavailable, err)
	}
	s.Metrics.finished(j.Msg, StatusSucceeded, "", finishedAt)
	return nil
}

// SetFailed records a failure: error_code, capped message and attempt.
func (s *Store) SetFailed(ctx context.Context, j *Job, finishedAt time.Time, f *JobError, attempt int) error {
	if err := checkFailure(f, attempt); err != nil {
		return err
	}
	saved := j.Claim
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		j.Claim = saved
		return s.setFailed(ctx, tx, j, finishedAt, f, attempt)
	})
	if err != nil {
		j.Claim = saved
		return unavailable(CodeRepoUnavailable, err)
	}
	return nil
}

func (s *Store) setFailed(ctx context.Context, tx lease.Execer, j *Job, at time.Time, f *JobError, attempt int) error {
	at = notBefore(at, j)
	return s.q.Move(ctx, tx, &j.Claim, StatusFailed, at, "finished_at = ?, error_code = ?, error_message = ?, error_attempt = ?, "+startedAt+release,
		sqldb.Micros(at), f.Code, Redact(f.Message), attempt)
}

// SetDeadLetter moves a failed job to the DLQ with its last failure.
func (s *Store) SetDeadLetter(ctx context.Context, j *Job, finishedAt time.Time, f *JobError, attempt int) error {
	if err := checkFailure(f, attempt); err != nil {
		return err
	}
	saved := j.Claim
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		j.Claim = saved
		return s.setDeadLetter(ctx, tx, j, finishedAt, f, attempt)
	})
	if err != nil {
		j.Claim = saved
		return unavailable(CodeRepoUnavailable, err)
	}
	return nil
}

func (s *Store) setDeadLetter(ctx context.Context, tx lease.Execer, j *Job, at time.Time, f *JobError, attempt int) error {
	at = notBefore(at, j)
	return s.q.Move(ctx, tx, &j.Claim, StatusDeadLetter, at, "finished_at = ?, error_code = ?, error_message = ?, error_attempt = ?",
		sqldb.Micros(at), f.Code, Redact(f.Message), attempt)
}

// Outcome is where a failure left its job.
type Outcome string

const (
	OutcomeFailed     Outcome = "failed"      // final
	OutcomeRetry      Outcome = "retry"       // visible again
	OutcomeDeadLetter Outcome = "dead_letter" // attempts exhausted
)

// Fail is §5.2's failure path in one transaction: set_failed with the code
// and attempt; a retryable code goes back to the queue after a backoff
// until max_attempts, then to the DLQ (set_dead_letter); a final code
// stays failed. The failure is counted and logged once it committed.
func (s *Store) Fail(ctx context.Context, j *Job, f *JobError) (Outcome, error) {
	if err := checkFailure(f, j.Attempt); err != nil {
		return "", err
	}
	saved := j.Claim
	var r failure
	now := notBefore(s.now(), j)
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		j.Claim = saved
		var maxAttempts int
		if err := tx.QueryRowContext(ctx, s.DB.Rebind("SELECT max_attempts FROM pipeline_jobs WHERE job_id = ?"), j.ID).Scan(&maxAttempts); err != nil {
			return err
		}
		var err error
		r, err = s.failTx(ctx, tx, j, now, f, maxAttempts, s.retryDelay(f.Code, j.Attempt))
		return err
	})
	if err != nil {
		j.Claim = saved
		return "", unavailable(CodeRepoUnavailable, err)
	}
	s.reportFailure(r)
	return r.out, nil
}

// retryDelay is the wait before the retry of a job that failed with code
// at attempt: UpstreamWait for data still on its way, Backoff otherwise.
// Waiting for data is not backed off exponentially (the edge comes back
// when it does), but jittered in [UpstreamWait/2, UpstreamWait) so the
// jobs of the edges one outage held back do not all run again together:
// that is Backoff.Larger of a backoff whose base is its cap.
func (s *Store) retryDelay(code string, attempt int) time.Duration {
	if code == CodeUpstreamIncomplete && s.UpstreamWait > 0 {
		return lease.Backoff{Base: s.UpstreamWait, Cap: s.UpstreamWait, Rand: s.Backoff.Rand}.Larger(attempt)
	}
	return s.Backoff.Delay(attempt)
}

// failTx records the failure f of j in tx and returns what to report once
// tx committed: DB.Tx may run a transaction more than once, and its commit
// may fail, so nothing here counts or logs.
func (s *Store) failTx(ctx context.Context, tx *sql.Tx, j *Job, now time.Time, f *JobError, maxAttempts int, delay time.Duration) (failure, error) {
	f = &JobError{Code: f.Code, Message: Redact(f.Message)}
	if err := s.setFailed(ctx, tx, j, now, f, j.Attempt); err != nil {
		return failure{}, err
	}
	out := OutcomeFailed
	switch {
	case Retry[f.Code] && j.Attempt < maxAttempts:
		out = OutcomeRetry
		if err := s.q.Move(ctx, tx, &j.Claim, StatusQueued, now, "visible_at = ?, finished_at = NULL", sqldb.Micros(now.Add(delay))); err != nil {
			return failure{}, err
		}
	case Retry[f.Code] || j.Attempt >= maxAttempts: // §5.2: any failure at max_attempts goes to the DLQ
		out = OutcomeDeadLetter
		if err := s.setDeadLetter(ctx, tx, j, now, f, j.Attempt); err != nil {
			return failure{}, err
		}
	}
	return failure{msg: j.Msg, status: j.Status, err: f, out: out, at: now, delay: delay}, nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// SucceedMany records the success of many jobs in one transaction, each
// fenced on its own claim, with its redacted result reference (RedactRef);
// it returns an error per job (a *lease.StaleError for a lost one, which
// leaves the others alone). If the transaction fails as a whole the jobs
// are written one by one.
func (s *Store) SucceedMany(ctx context.Context, jobs []*Job, refs []string) []error {
	now := notBefore(s.now(), jobs...)
	redacted := make([]string, len(refs))
	for i, r := range refs {
		redacted[i] = RedactRef(r)
	}
	refs = redacted
	saved := make([]lease.Claim, len(jobs))
	for i, j := range jobs {
		saved[i] = j.Claim
	}
	var out []error
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		for i, j := range jobs {
			j.Claim = saved[i]
		}
		var err error
		out, err = s.succeedTx(ctx, tx, jobs, refs, now)
		return err
	})
	if err != nil {
		for i, j := range jobs {
			j.Claim = saved[i]
		}
		out = make([]error, len(jobs))
		if len(jobs) == 1 {
			out[0] = unavailable(CodeRepoUnavailable, err)
			return out
		}
		for i := range jobs {
			out[i] = s.SucceedMany(ctx, jobs[i:i+1], refs[i:i+1])[0]
		}
		return out
	}
	for i, j := range jobs {
		if out[i] == nil {
			s.Metrics.finished(j.Msg, StatusSucceeded, "", now)
		}
	}
	return out
}

// succeedSet is the success write: it closes the attempt as SetSucceeded
// does (started_at from the claim's stamp, lease released).
const succeedSet = "finished_at = ?, result_ref = ?, " + startedAt + release

// succeedTx writes the successes in tx. On Postgres lease.Queue.MoveEach
// sends them as arrays, one statement for the whole batch. On SQLite the
// jobs sharing a status and result reference (all of them for a type that
// returns none) go in one lease.Queue.MoveMany statement keyed by a JSON
// list of (id, claim_version): a statement per job cost more in the VM's
// setup than in the writes themselves.
func (s *Store) succeedTx(ctx context.Context, tx *sql.Tx, jobs []*Job, refs []string, now time.Time) ([]error, error) {
	if s.DB.Engine == sqldb.Postgres {
		steps := make([]lease.Step, len(jobs))
		for i, j := range jobs {
			steps[i] = lease.Step{Claim: &j.Claim, To: StatusSucceeded, Set: succeedSet,
				Args: []any{sqldb.Micros(now), nullString(refs[i])}}
		}
		return s.q.MoveEach(ctx, tx, steps, now)
	}
	type key struct{ from, ref string }
	groups := map[key][]int{}
	var order []key
	for i, j := range jobs {
		k := key{j.Status, refs[i]}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	out := make([]error, len(jobs))
	for _, k := range order {
		idx := groups[k]
		claims := make([]*lease.Claim, len(idx))
		at := make(map[*lease.Claim]int, len(idx))
		for n, i := range idx {
			claims[n] = &jobs[i].Claim
			at[claims[n]] = i
		}
		stale, err := s.q.MoveMany(ctx, tx, claims, []string{StatusSucceeded}, now, succeedSet, sqldb.Micros(now), nullString(k.ref))
		if err != nil {
			return nil, err
		}
		for _, c := range stale {
			out[at[c]] = &lease.StaleError{Table: s.q.Spec.Table, ID: c.ID, Version: c.Version}
		}
	}
	return out, nil
}
