package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Claim takes up to n queued jobs for worker under a lease of ttl. Jobs
// whose lease expired are first moved back along the table (their state ->
// queued, or -> failed -> dead_letter when attempts are spent) with a new
// claim_version, so the same call may claim them again. Each claim records
// its queued -> claimed event.
func (s *Store) Claim(ctx context.Context, worker string, n int, ttl time.Duration) ([]*Job, error) {
	s.now() // the first measurement of the database clock, before the transaction holds a connection
	var jobs []*Job
	var expired bool // onExpire wrote events: the dispatcher is woken for them too
	ctx = context.WithValue(ctx, expiredKey{}, &expired)
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		expired = false // a run rolled back and retried starts again
		now := s.now()
		claims, err := s.q.ClaimTx(ctx, tx, worker, n, ttl, now)
		if err != nil || len(claims) == 0 {
			jobs = nil
			return err
		}
		jobs = make([]*Job, len(claims))
		for i, c := range claims {
			if jobs[i], err = fromClaim(c); err != nil {
				return err
			}
		}
		evs := make([]Event, len(jobs))
		for i, j := range jobs {
			evs[i] = transition(j, schema.StatusQueued, schema.StatusClaimed, j.Seq, now)
		}
		return insertEvents(ctx, s.db, tx, evs)
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: claim: %w", err)
	}
	if len(jobs) > 0 || expired {
		s.notify()
	}
	return jobs, nil
}

// Heartbeat extends j's lease; *lease.StaleError when it was lost.
func (s *Store) Heartbeat(ctx context.Context, j *Job, ttl time.Duration) error {
	c := j.claim()
	if err := s.q.Heartbeat(ctx, &c, ttl); err != nil {
		return err
	}
	j.mu.Lock()
	j.LeaseExpiresAt = c.LeaseExpiresAt
	j.mu.Unlock()
	return nil
}

// Keep runs work while heartbeating j's lease every ttl/3; work's context
// is cancelled as soon as the lease is found stale. opts (e.g.
// lease.OnRenewError, to log failed renewals) are passed to lease.Keep.
func (s *Store) Keep(ctx context.Context, j *Job, ttl time.Duration, work func(context.Context) error, opts ...lease.KeepOption) error {
	return lease.Keep(ctx, ttl, func(ctx context.Context) error { return s.Heartbeat(ctx, j, ttl) }, work, opts...)
}

// Advance moves j to the next working state (fetching, processing or
// uploading) and records its event. A move the table forbids is a
// *lease.TransitionError; a lost lease a *lease.StaleError.
func (s *Store) Advance(ctx context.Context, j *Job, to string) error {
	if Transitions.IsTerminal(to) || to == schema.StatusQueued {
		return &lease.TransitionError{Machine: Transitions.Machine, From: j.Status, To: to}
	}
	return s.afterEvents(s.write(ctx, j, func(tx *sql.Tx, c *lease.Claim, now time.Time) error {
		from := c.Status
		extra := ""
		var args []any
		if to == schema.StatusFetching {
			extra, args = "started_at = COALESCE(started_at, ?)", []any{sqldb.Micros(now)}
		}
		if err := s.move(ctx, tx, j, c, to, now, extra, args...); err != nil {
			return err
		}
		return insertEvents(ctx, s.db, tx, []Event{transition(j, from, to, c.Seq, now)})
	}))
}

// Succeed moves j from uploading to succeeded with its outputs.
func (s *Store) Succeed(ctx context.Context, j *Job, outputs []OutputFile) error {
	out, err := json.Marshal(outputs)
	if err != nil {
		return fmt.Errorf("inbox: outputs: %w", err)
	}
	return s.afterEvents(s.write(ctx, j, func(tx *sql.Tx, c *lease.Claim, now time.Time) error {
		from := c.Status
		if err := s.move(ctx, tx, j, c, schema.StatusSucceeded, now,
			"outputs = ?, finished_at = ?, lease_expires_at = NULL, error_code = NULL, last_error = NULL",
			string(out), sqldb.Micros(now)); err != nil {
			return err
		}
		ev := transition(j, from, schema.StatusSucceeded, c.Seq, now)
		ev.Outputs = out
		return insertEvents(ctx, s.db, tx, []Event{ev})
	}))
}

// Fail records a failed attempt of j and applies the retry policy: a
// Permanent error ends in failed; otherwise, while attempt_count <
// max_attempts, the job returns to queued after backoff (429 from the larger
// bucket). Once the budget is spent (attempt_count >= max_attempts), every
// class moves failed -> dead_letter, both transitions recorded. It returns
// the job's new status.
func (s *Store) Fail(ctx context.Context, j *Job, jerr JobError) (string, error) {
	jerr.Message = daemon.CapMessage(jerr.Message)
	if jerr.Code == "" {
		jerr.Code = string(jerr.Class)
	}
	var final string
	err := s.write(ctx, j, func(tx *sql.Tx, c *lease.Claim, now time.Time) error {
		st, err := s.fail(ctx, tx, j, c, jerr, now)
		final = st
		return err
	})
	if err != nil {
		return "", err
	}
	return final, s.afterEvents(nil)
}

// Release gives j back to the queue without counting it as a failure, for
// a worker that is shutting down: the job is claimable again at once.
func (s *Store) Release(ctx context.Context, j *Job) error {
	return s.release(ctx, j, nil)
}

// ReleaseError is Release for a job given back because of the worker's
// machine rather than the job (e.g. its transcoder is missing): no attempt
// is spent, and jerr's code and capped message are recorded as the job's
// error_code/last_error so the reason shows in its status.
func (s *Store) ReleaseError(ctx context.Context, j *Job, jerr JobError) error {
	jerr.Message = daemon.CapMessage(jerr.Message)
	if jerr.Code == "" {
		jerr.Code = string(jerr.Class)
	}
	return s.release(ctx, j, &jerr)
}

func (s *Store) release(ctx context.Context, j *Job, jerr *JobError) error {
	return s.afterEvents(s.write(ctx, j, func(tx *sql.Tx, c *lease.Claim, now time.Time) error {
		from := c.Status
		set := "worker_id = NULL, lease_expires_at = NULL, next_attempt_at = ?, attempt_count = attempt_count - 1"
		args := []any{sqldb.Micros(now)}
		if jerr != nil {
			set += ", error_code = ?, last_error = ?"
			args = append(args, jerr.Code, jerr.Message)
		}
		if err := s.move(ctx, tx, j, c, schema.StatusQueued, now, set, args...); err != nil {
			return err
		}
		ev := transition(j, from, schema.StatusQueued, c.Seq, now)
		ev.AttemptCount-- // the release gives the attempt back, as the row now says
		return insertEvents(ctx, s.db, tx, []Event{ev})
	}))
}

// write runs fn in one transaction on a copy of j's claim, and makes the
// copy j's claim only once the transaction has committed. A failed commit
// (or a rolled-back fn) leaves j as it was, so the executor's retry of the
// same write is fenced on what the row still holds instead of being told
// its claim is stale; and on Postgres, where DB.Tx re-runs fn after a
// serialization failure, each run starts from the committed claim.
//
// The time is read before the transaction takes a connection: a store's
// first reading measures the database clock on a connection of its own,
// which, on a pool the transaction exhausts, it would wait for until the
// measurement gives up (5 s), the transaction open all along.
func (s *Store) write(ctx context.Context, j *Job, fn func(tx *sql.Tx, c *lease.Claim, now time.Time) error) error {
	var c lease.Claim
	now := s.now()
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		c = j.claim()
		return fn(tx, &c, now)
	})
	if err != nil {
		return err
	}
	j.commitClaim(c)
	return nil
}

// move applies one transition of j (claim c) inside tx. Every single-job
// status write of the inbox goes through it (SucceedMany, the batch path,
// checks the same guards before its one statement). A move out of queued is
// refused (checkHeld: the claim alone makes one). The queue checks the
// move against Transitions and fences it on claim_version and the current
// status; the guards of §3 (Guards: failed -> queued only while
// attempt_count < max_attempts) are checked here with the claim's counters,
// so no caller can bypass them. A rejected move is a *lease.TransitionError.
func (s *Store) move(ctx context.Context, tx lease.Execer, j *Job, c *lease.Claim, to string, now time.Time, set string, args ...any) error {
	if err := checkHeld(c.Status, to); err != nil {
		return err
	}
	if err := CheckGuard(c.Status, to, c.Attempt, j.MaxAttempts); err != nil {
		return err
	}
	return s.q.Move(ctx, tx, c, to, now, set, args...)
}

// decision is a row of the failure table: what a failed attempt leads to.
type decision struct {
	path  []string // states to move through
	retry bool     // schedule next_attempt_at by backoff
}

// failurePlan is the retry policy as data: by class, and whether the
// attempt budget is spent.
var failurePlan = map[Class]map[bool]decision{
	// A permanent error ends in failed; on the last attempt the budget is
	// spent as well, and §5 sends every such job on to dead_letter.
	Permanent:   {false: {path: []string{schema.StatusFailed}}, true: {path: []string{schema.StatusFailed, schema.StatusDeadLetter}}},
	Retryable:   {false: {path: []string{schema.StatusQueued}, retry: true}, true: {path: []string{schema.StatusFailed, schema.StatusDeadLetter}}},
	RateLimited: {false: {path: []string{schema.StatusQueued}, retry: true}, true: {path: []string{schema.StatusFailed, schema.StatusDeadLetter}}},
	AuthExpired: {false: {path: []string{schema.StatusQueued}, retry: true}, true: {path: []string{schema.StatusFailed, schema.StatusDeadLetter}}},
	// An expired lease (crashed or partitioned worker, or a job that kills
	// its worker) waits like a retryable failure, with a floor (Policy.Delay).
	leaseExpired: {false: {path: []string{schema.StatusQueued}, retry: true}, true: {path: []string{schema.StatusFailed, schema.StatusDeadLetter}}},
}

// leaseExpired classifies the attempt of a worker whose lease ran out.
const leaseExpired Class = "lease_expired"

func (s *Store) fail(ctx context.Context, tx lease.Execer, j *Job, c *lease.Claim, jerr JobError, now time.Time) (string, error) {
	plan, ok := failurePlan[jerr.Class]
	if !ok {
		plan = failurePlan[Retryable]
	}
	spent := !Guards[[2]string{schema.StatusFailed, schema.StatusQueued}](c.Attempt, j.MaxAttempts)
	d := plan[spent]
	body := &ErrorBody{Code: jerr.Code, Message: jerr.Message}
	var evs []Event
	for _, to := range d.path {
		from := c.Status
		var set []string
		var args []any
		set = append(set, "error_code = ?", "last_error = ?")
		args = append(args, jerr.Code, jerr.Message)
		switch {
		case to == schema.StatusQueued:
			next := now
			if d.retry {
				next = now.Add(s.policy.Delay(jerr.Class, c.Attempt))
			}
			set = append(set, "worker_id = NULL", "lease_expires_at = NULL", "next_attempt_at = ?")
			args = append(args, sqldb.Micros(next))
		case Transitions.IsTerminal(to):
			set = append(set, "lease_expires_at = NULL", "finished_at = ?")
			args = append(args, sqldb.Micros(now))
		}
		if err := s.move(ctx, tx, j, c, to, now, strings.Join(set, ", "), args...); err != nil {
			return "", err
		}
		ev := transition(j, from, to, c.Seq, now)
		ev.AttemptCount = c.Attempt
		if to == schema.StatusFailed || to == schema.StatusDeadLetter {
			ev.Error = body
		}
		evs = append(evs, ev)
	}
	if err := insertEvents(ctx, s.db, tx, evs); err != nil {
		return "", err
	}
	return c.Status, nil
}

// Credentials opens j's sealed storage credentials in memory, at the
// credential_version currently stored (which a refresh may have advanced).
func (s *Store) Credentials(ctx context.Context, j *Job) (credentials.Storage, int, error) {
	var sealed credentials.Sealed
	var kek *string
	var ver *int
	var credVersion int
	err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT storage_creds_encrypted, storage_creds_dek_wrapped,
		storage_creds_kek_id, storage_creds_encryption_version, credential_version FROM inbox_jobs WHERE id = ?`), j.ID).
		Scan(&sealed.Ciphertext, &sealed.WrappedDEK, &kek, &ver, &credVersion)
	if errors.Is(err, sql.ErrNoRows) {
		return credentials.Storage{}, 0, ErrNotFound
	}
	if err != nil {
		return credentials.Storage{}, 0, fmt.Errorf("inbox: read credentials of %s: %w", j.ID, err)
	}
	if kek == nil || ver == nil {
		return credentials.Storage{}, 0, fmt.Errorf("inbox: job %s has no stored credentials", j.ID)
	}
	sealed.KEKID, sealed.Version = *kek, *ver
	st, err := s.keys.OpenStorage(sealed, j.ID, j.RequesterID, credVersion)
	if err != nil {
		return credentials.Storage{}, 0, fmt.Errorf("inbox: credentials of %s: %w", j.ID, err)
	}
	j.CredentialVersion = credVersion
	return st, credVersion, nil
}

// CountRefreshAttempt adds one to j's refresh_attempt_count (fenced) and
// reports whether the refresh budget still allows this attempt.
func (s *Store) CountRefreshAttempt(ctx context.Context, j *Job) (allowed bool, err error) {
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		c := j.claim()
		return s.q.Exec(ctx, tx, &c, "refresh_attempt_count = refresh_attempt_count + 1")
	})
	if err != nil {
		return false, err
	}
	j.RefreshAttempts++
	return j.RefreshAttempts <= s.policy.MaxRefreshAttempts, nil
}

// Progress records an intermediate event for j's current status carrying
// progress (0-100), without a status change; fenced by j's claim and a
// leased status (a *lease.StaleError once the job is queued or finished). The
// sequence still advances so events stay totally ordered per job.
func (s *Store) Progress(ctx context.Context, j *Job, percent int) error {
	if percent < 0 {
		percent = 0
	}
	if percent > 100 {
		percent = 100
	}
	err := s.write(ctx, j, func(tx *sql.Tx, c *lease.Claim, now time.Time) error {
		var seq int64
		// Only while the job is leased: a job back in queued or finished
		// still carries this claim_version, and a progress event must not
		// follow its requeue or its terminal event.
		err := tx.QueryRowContext(ctx, s.db.Rebind(`UPDATE inbox_jobs SET event_seq = event_seq + 1, updated_at = ?
			WHERE id = ? AND claim_version = ? AND status = ? AND status IN (`+leasedList+`) RETURNING event_seq`),
			sqldb.Micros(now), c.ID, c.Version, c.Status).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			return &lease.StaleError{Table: "inbox_jobs", ID: c.ID, Version: c.Version}
		}
		if err != nil {
			return err
		}
		ev := transition(j, c.Status, c.Status, seq, now)
		ev.Progress = &percent
		c.Seq = seq
		return insertEvents(ctx, s.db, tx, []Event{ev})
	})
	if err == nil {
		s.notify()
	}
	return err
}

// UpdateCredentials stores credentials a requester sent for its job (the
// refresh flow, not fenced by a claim: the job may be queued between
// attempts), sealed under credential_version+1. ErrNotFound, ErrForbidden
// (another requester's job) and ErrFinished (terminal job) are returned
// as such; credentials for another source object are ErrSourceMismatch,
// judged by the row's source fingerprint without opening what is sealed.
func (s *Store) UpdateCredentials(ctx context.Context, jobID, requesterID string, creds credentials.Storage) (int, error) {
	var next int
	now := s.now() // before the transaction holds a connection (see Store.write)
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var owner, status string
		var srcURL, srcBucket, fingerprint sql.NullString
		var cur int
		var old credentials.Sealed
		var kek *string
		var ver *int
		err := tx.QueryRowContext(ctx, s.db.Rebind(`SELECT requester_id, status, credential_version, source_url, source_bucket,
			source_fingerprint, storage_creds_encrypted, storage_creds_dek_wrapped, storage_creds_kek_id, storage_creds_encryption_version
			FROM inbox_jobs WHERE id = ?`), jobID).
			Scan(&owner, &status, &cur, &srcURL, &srcBucket, &fingerprint, &old.Ciphertext, &old.WrappedDEK, &kek, &ver)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if owner != requesterID {
			return ErrForbidden
		}
		if Transitions.IsTerminal(status) {
			return ErrFinished
		}
		if err := fitsSource(srcURL.String, creds); err != nil {
			return err
		}
		switch {
		case fingerprint.Valid:
			// Every fingerprint written passed this check against the one
			// before it, so all name the object the job was enqueued with.
			if err := sameFingerprint(fingerprint.String, jobID, creds); err != nil {
				return err
			}
		case creds.SourceURL != "":
			// A row enqueued before source_fingerprint existed: the
			// object-naming part of its query is only in the sealed URL, and
			// SQL cannot backfill what needs the key. Refusing its refreshes
			// would strand the jobs in flight across the upgrade, so it is
			// judged the old way, once: the write below stores the
			// fingerprint, and later refreshes of the job no longer open
			// anything. Compared with the blob of version cur, which the
			// write is fenced on.
			if kek == nil || ver == nil {
				return fmt.Errorf("inbox: job %s has no stored credentials", jobID)
			}
			old.KEKID, old.Version = *kek, *ver
			prev, err := s.keys.OpenStorage(old, jobID, owner, cur)
			if err != nil {
				return fmt.Errorf("inbox: credentials of %s: %w", jobID, err)
			}
			if err := sameObject(prev.SourceURL, creds.SourceURL); err != nil {
				return err
			}
		}
		next = cur + 1
		sealed, err := s.keys.SealStorage(creds, jobID, requesterID, next)
		if err != nil {
			return err
		}
		if s.credentialRace != nil {
			if err := s.credentialRace(ctx, tx); err != nil {
				return err
			}
		}
		// The read above may be stale by now (on Postgres another
		// transaction can commit in between): the write re-checks both the
		// version it sealed against and that the job is still live, and
		// when it matches nothing, the row as it is now says why.
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE inbox_jobs SET credential_version = ?, storage_creds_encrypted = ?,
			storage_creds_dek_wrapped = ?, storage_creds_kek_id = ?, storage_creds_encryption_version = ?, source_fingerprint = ?,
			updated_at = ?
			WHERE id = ? AND credential_version = ? AND status NOT IN (`+terminalList+`)`),
			next, sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version, sourceFingerprint(jobID, creds),
			sqldb.Micros(now), jobID, cur)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		if err := tx.QueryRowContext(ctx, s.db.Rebind(`SELECT status FROM inbox_jobs WHERE id = ?`), jobID).Scan(&status); err != nil {
			return err
		}
		if Transitions.IsTerminal(status) {
			return ErrFinished
		}
		return fmt.Errorf("%w: %s", ErrCredentialConflict, jobID)
	})
	if err != nil {
		return 0, err
	}
	return next, nil
}

// fitsSource checks creds against the source the job recorded at enqueue:
// its plain URL (credentials.PlainURL), or "" for a bucket source.
func fitsSource(recordedURL string, creds credentials.Storage) error {
	switch {
	case recordedURL == "" && creds.SourceURL != "":
		return fmt.Errorf("%w: the job reads its source from a bucket; send source credentials, not a URL", ErrSourceMismatch)
	case recordedURL != "" && creds.SourceURL == "":
		return fmt.Errorf("%w: the job fetches its source from a URL; send a new URL for it, not credentials", ErrSourceMismatch)
	case recordedURL != "" && credentials.PlainURL(creds.SourceURL) != recordedURL:
		return errOtherObject
	}
	return nil
}

// errOtherObject refuses a refreshed URL for another object than the job's.
var errOtherObject = fmt.Errorf("%w: the URL names another object than the job's source (only its signature parameters may change)", ErrSourceMismatch)

// sameObject checks a refreshed source URL against the job's current one,
// for a row that has no source fingerprint yet (sameFingerprint applies
// the same rule to rows that have one):
// only signature parameters may differ (credentials.ObjectURL). A versionId,
// a file id or a response-* override names the object as much as the path
// does, and a refresh never changes what the job transcodes.
func sameObject(currentURL, refreshedURL string) error {
	cur := credentials.ObjectURL(currentURL)
	if cur == "" || cur != credentials.ObjectURL(refreshedURL) {
		return errOtherObject
	}
	return nil
}

// CredentialVersion re-reads the job's current credential_version.
func (s *Store) CredentialVersion(ctx context.Context, jobID string) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT credential_version FROM inbox_jobs WHERE id = ?`), jobID).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, ErrNotFound
	}
	return v, err
}

func (s *Store) afterEvents(err error) error {
	if err == nil {
		s.notify()
	}
	return err
}

// Reclaim recovers up to n jobs whose lease expired (to queued, or to
// dead_letter when their attempts are spent) without claiming them; Claim
// does this itself, a sweeper calls it while no executor claims.
func (s *Store) Reclaim(ctx context.Context, n int) (int, error) {
	got, err := s.q.Reclaim(ctx, n)
	if err == nil && got > 0 {
		s.notify()
	}
	return got, err
}
