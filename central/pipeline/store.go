package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Store is the SQL queue and job repo on one table, for both engines.
type Store struct {
	DB *sqldb.DB
	// MaxAttempts is max_attempts of new jobs (contract: 5).
	MaxAttempts int
	// Backoff delays a retried failure (the expired lease of a dead worker
	// is visible again at once: the visibility timeout was its delay).
	Backoff lease.Backoff
	// UpstreamWait spaces the retries of a job whose data is still on its
	// way (UPSTREAM_INCOMPLETE): each waits a time drawn from
	// [UpstreamWait/2, UpstreamWait) instead of Backoff. Backoff is sized
	// for a fault to clear in minutes; an edge whose uplink is down can
	// take hours to deliver its day, and its job would spend every attempt
	// before the data came. 0 means Backoff.
	UpstreamWait time.Duration
	Metrics      *Metrics
	Log          *slog.Logger
	// Types, when set, refuses a submit of an unregistered job type or one
	// its type's Validate refuses (INVALID_MESSAGE).
	Types *Registry
	// OnSubmit, when set, runs after a submit created a job (wakes the
	// local worker).
	OnSubmit func()
	q        *lease.Queue
	locked   lockGuard
}

// NewStore returns a store on db; now is this process's clock (nil:
// time.Now), corrected to the database clock by the lease queue: every
// time the store writes — visible_at of a submit, an enqueue, a retry and a
// redrive, which a claim compares with the lease queue's clock, and
// created_at, updated_at, finished_at — is the database's, so a pod whose
// clock runs ahead (or behind) does not delay (or hasten) the jobs it
// writes. A fake now (tests) moves the store's time with it.
func NewStore(db *sqldb.DB, now func() time.Time) *Store {
	s := &Store{DB: db, MaxAttempts: 5, Backoff: lease.Backoff{Base: 5 * time.Second, Cap: 5 * time.Minute}, UpstreamWait: time.Hour,
		Log: slog.New(slog.DiscardHandler)}
	spec := Lease
	spec.Returning = []string{"idempotency_key", "job_type", "symbol", "asof", "requested_by", "created_at", "max_attempts"}
	// Now stays nil for the real clock: the queue then measures the
	// database clock again every lease.ClockResync (a fake Now is measured
	// once).
	s.q = &lease.Queue{DB: db, Spec: spec, Machine: Transitions, Now: now, OnExpire: s.onExpire,
		Extra: func() []any {
			return []any{new(string), new(string), new(string), new(string), new(string), new(int64), new(int)}
		}}
	return s
}

// LeaseQueue is the store's lease.Queue (for Validate at start). Jobs are
// claimed and reclaimed through Store.Claim and Store.Reclaim, which report
// the failures of expired leases after their commit; the queue's own Claim
// and Reclaim refuse to recover expired leases.
func (s *Store) LeaseQueue() *lease.Queue { return s.q }

// ClaimOnly restricts the store's claims to jobs of the named types: a pod
// claims only what it can run. Pods may differ in EUTERPE_PIPELINE_TYPES
// (a rolling deploy adds a type to some pods first); were every pod to
// claim every job, one without the type would spend the job's attempts on
// STAGE_UNAVAILABLE and could dead-letter it before a pod that runs it
// ever claimed it. A job of a type no pod runs stays queued, visible to
// the console and the queue metrics, until one does. Call it before the
// first claim; names must be registered job type names.
func (s *Store) ClaimOnly(names []string) error {
	quoted := make([]string, 0, len(names))
	for _, n := range names {
		if !jobTypeRe.MatchString(n) {
			return fmt.Errorf("pipeline: claim only job type %q: must match %s", n, jobTypeRe)
		}
		quoted = append(quoted, "'"+n+"'") // the pattern leaves nothing to escape
	}
	if len(quoted) == 0 {
		s.q.Spec.Where = "1 = 0"
		return nil
	}
	s.q.Spec.Where = "job_type IN (" + strings.Join(quoted, ", ") + ")"
	return nil
}

// now is the time by the database's clock (lease.Queue.Time): the clock
// of every time the store writes and of every ready time a claim compares.
func (s *Store) now() time.Time { return s.q.Time() }

// Now is the store's time: this process's clock corrected to the
// database's (lease.Queue.Time).
func (s *Store) Now() time.Time { return s.now() }

// ErrNotFound is returned for an unknown job id.
var ErrNotFound = errors.New("pipeline: job not found")

// ErrConflict is returned by Redrive when another job of the key is active.
var ErrConflict = errors.New("pipeline: another job of the same idempotency key is active")

// NewJobID returns a time-ordered job id (UUIDv7), so keyset pages by id
// are pages by creation time.
func NewJobID() string { return uuid.Must(uuid.NewV7()).String() }

// Request is what a producer submits.
type Request struct {
	JobType     string
	Symbol      string
	Asof        string
	RequestedBy string
}

// Message builds the JobMessage of a new job for r.
func (s *Store) Message(r Request) JobMessage {
	return JobMessage{JobID: NewJobID(), IdempotencyKey: MakeIdempotencyKey(r.JobType, r.Symbol, r.Asof),
		JobType: r.JobType, Symbol: r.Symbol, Asof: r.Asof, RequestedBy: r.RequestedBy, CreatedAt: s.now().UTC(), Attempt: 0}
}

// Submit is §5.1 in one transaction: create_queued and, for a new job,
// enqueue commit together, so a job is never created without its message.
// The same key while queued, running or succeeded returns that job
// (created: false, counted as an idempotency conflict). A database that
// cannot be reached is a *UnavailableError (QUEUE_UNAVAILABLE), and that
// answer means nothing was written: on SQLite the transaction and the
// caller settle before the COMMIT (lockGuard); on Postgres a statement cut
// off by ctx is ended on the server too, and the job looked up, before the
// answer (sqldb.DB.Settled). Only a server that stops answering in between
// leaves the outcome unknown; the producer's retry with the same key then
// finds the job if it was created.
func (s *Store) Submit(ctx context.Context, r Request) (Created, error) {
	return s.SubmitMessage(ctx, s.Message(r))
}

// SubmitMessage is Submit of m, a message of Message. A caller that retries
// a failed submit sends the same m again: should the failed try have
// committed after all, the retry finds the job by its id and answers
// created: true, not an idempotency conflict with itself.
func (s *Store) SubmitMessage(ctx context.Context, m JobMessage) (Created, error) {
	err := s.checkSubmit(m)
	if err != nil {
		s.logJob(m, "", err).Error("pipeline message refused", alertAttr(err)...)
		return Created{}, err
	}
	var out Created
	// Read before a connection is held: a reading of the database clock
	// may take one of its own (see Claim).
	now := s.now()
	if s.DB.Engine == sqldb.Postgres {
		// One statement is one transaction: no BEGIN/COMMIT round trips.
		err = s.DB.Settled(ctx, func(ctx context.Context, ex sqldb.Execer) error {
			var err error
			out, err = s.insertQueued(ctx, ex, m, now)
			return err
		})
		if sqldb.WasCut(err) {
			out, err = s.submittedAfterAll(ctx, m, err)
		}
	} else {
		err = s.locked.run(ctx, s.DB, func(commit func() error) error {
			return s.DB.Tx(ctx, func(tx *sql.Tx) error {
				var err error
				if out, err = s.submitTx(ctx, tx, m, now); err != nil {
					return err
				}
				return commit()
			})
		})
	}
	if err != nil {
		return Created{}, unavailable(CodeQueueUnavailable, fmt.Errorf("pipeline submit: %w", err))
	}
	s.submitted(m, out)
	return out, nil
}

// checkSubmit is what every producer's message must pass: the data
// contract, a job id of NewJobID, and its registered type's own checks.
func (s *Store) checkSubmit(m JobMessage) error {
	err := m.Validate()
	if err == nil && !IsJobID(m.JobID) {
		err = invalid("job_id must be a UUID (NewJobID)")
	}
	if err == nil && s.Types != nil {
		err = s.Types.Check(m)
	}
	return err
}

// submittedAfterAll learns whether m's insert, cut off (its context ended or
// its connection broke) and settled on the server, committed before it ended: then the job is the
// answer, else failed, the insert's error.
func (s *Store) submittedAfterAll(ctx context.Context, m JobMessage, failed error) (Created, error) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	out := Created{JobID: m.JobID, Created: true}
	err := s.DB.QueryRowContext(lctx, s.DB.Rebind(`SELECT status FROM pipeline_jobs WHERE job_id = ?`), m.JobID).Scan(&out.Status)
	if err != nil {
		if !errors.Is(err, sql.ErrNoRows) {
			failed = fmt.Errorf("%w (%w: look up the job: %w)", failed, sqldb.ErrUnsettled, err)
		}
		return Created{}, failed
	}
	return out, nil
}

// submitTx is create_queued and enqueue in tx: the queued row is inserted
// visible from now (the row is the message), or the key's active job is
// returned. now is the store's, read before tx began.
func (s *Store) submitTx(ctx context.Context, tx *sql.Tx, m JobMessage, now time.Time) (Created, error) {
	return s.insertQueued(ctx, tx, m, now)
}

// submitted counts and logs a committed submit.
func (s *Store) submitted(m JobMessage, out Created) {
	if out.Created {
		s.Metrics.enqueued(m.JobType)
		s.logJob(m, StatusQueued, nil).Info("pipeline job enqueued", "requested_by", m.RequestedBy)
		if s.OnSubmit != nil {
			s.OnSubmit()
		}
	} else {
		s.Metrics.conflict(m.JobType)
		s.logJob(JobMessage{JobID: out.JobID, IdempotencyKey: m.IdempotencyKey, Symbol: m.Symbol, Asof: m.Asof}, out.Status, nil).
			Info("pipeline job exists for the key", "error_code", CodeIdempotencyConflict)
	}
}

func alertAttr(err error) []any {
	if Alert[ErrorCode(err)] {
		return []any{"alert", true}
	}
	return nil
}

var activeList = "'" + strings.Join(ActiveStatuses, "', '") + "'"

// CreateQueued is create_queued alone, in its own transaction: the row is
// created queued but not yet visible (Enqueue makes it so). Producers use
// Submit, which does both in one commit. The message passes Submit's
// checks, its job type's included: a message refused here would otherwise
// become a job every worker fails.
func (s *Store) CreateQueued(ctx context.Context, m JobMessage) (Created, error) {
	if err := s.checkSubmit(m); err != nil {
		s.logJob(m, "", err).Error("pipeline message refused", alertAttr(err)...)
		return Created{}, err
	}
	var out Created
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.createQueued(ctx, tx, m)
		return err
	})
	return out, unavailable(CodeRepoUnavailable, err)
}

func (s *Store) createQueued(ctx context.Context, tx *sql.Tx, m JobMessage) (Created, error) {
	return s.insertQueued(ctx, tx, m, time.Time{})
}

// insertQueued inserts m's queued row — visible from visibleAt when it is
// set (create_queued and enqueue in one statement), invisible until Enqueue
// otherwise — unless the key has its active job, which it returns.
func (s *Store) insertQueued(ctx context.Context, ex sqldb.Execer, m JobMessage, visibleAt time.Time) (Created, error) {
	now := sqldb.Micros(m.CreatedAt)
	var visible any
	if !visibleAt.IsZero() {
		visible = sqldb.Micros(visibleAt)
	}
	for try := 0; ; try++ {
		out, err := s.insertOnce(ctx, ex, m, visible, now)
		// The active job of the key may have failed between the insert
		// that found it and the select that read it: insert again.
		if errors.Is(err, sql.ErrNoRows) && try < 3 {
			continue
		}
		return out, err
	}
}

func (s *Store) insertOnce(ctx context.Context, ex sqldb.Execer, m JobMessage, visible any, now int64) (Created, error) {
	var id string
	err := s.DB.QueryRowTx(ctx, ex, `INSERT INTO pipeline_jobs (job_id, idempotency_key, job_type, symbol, asof, requested_by,
		status, max_attempts, visible_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (idempotency_key) WHERE status IN (`+activeList+`) DO NOTHING RETURNING job_id`,
		m.JobID, m.IdempotencyKey, m.JobType, m.Symbol, m.Asof, m.RequestedBy, StatusQueued, s.MaxAttempts, visible, now, now).Scan(&id)
	if err == nil {
		return Created{JobID: id, Created: true, Status: StatusQueued}, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Created{}, err
	}
	// The key has its active job (committed: on Postgres the insert waited
	// for a concurrent inserter to finish before it did nothing).
	var out Created
	err = s.DB.QueryRowTx(ctx, ex, `SELECT job_id, status FROM pipeline_jobs WHERE idempotency_key = ? AND status IN (`+activeList+`)`,
		m.IdempotencyKey).Scan(&out.JobID, &out.Status)
	// The job is m's own when an earlier try of this submit committed it.
	out.Created = err == nil && out.JobID == m.JobID
	return out, err
}

// Enqueue makes the message of a created job visible now (message_id is
// the job id). Its own transaction; Submit calls it inside its own.
func (s *Store) Enqueue(ctx context.Context, m JobMessage) (EnqueueResult, error) {
	if err := m.Validate(); err != nil {
		return EnqueueResult{}, err
	}
	// Read before the transaction holds a connection: the first reading
	// of the database clock takes one of its own (see Claim).
	now := s.now()
	var out EnqueueResult
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.enqueue(ctx, tx, m, now)
		return err
	})
	return out, unavailable(CodeQueueUnavailable, err)
}

func (s *Store) enqueue(ctx context.Context, tx *sql.Tx, m JobMessage, now time.Time) (EnqueueResult, error) {
	res, err := s.DB.ExecTx(ctx, tx, `UPDATE pipeline_jobs SET visible_at = ?, updated_at = ? WHERE job_id = ? AND status = ? AND visible_at IS NULL`,
		sqldb.Micros(now), sqldb.Micros(now), m.JobID, StatusQueued)
	if err != nil {
		return EnqueueResult{}, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return EnqueueResult{}, invalid("job %s is not a created, unenqueued job", m.JobID)
	}
	return EnqueueResult{MessageID: m.JobID, VisibleAt: now.UTC()}, nil
}

// Ping is the queue's ping (/ready "queue"): a write transaction can be
// taken within ctx, since enqueue needs one. On SQLite the write lock is
// asked for with a busy timeout of its own, so a file another process holds
// locked reports error(database_locked) instead of stalling /ready.
func (s *Store) Ping(ctx context.Context) error {
	err := pingWrite(ctx, s.DB, 1000)
	if err == nil {
		return nil
	}
	if u := unavailable(CodeQueueUnavailable, err); u != err {
		return u
	}
	return &UnavailableError{Code: CodeQueueUnavailable, Reason: "error", Err: err}
}

// RepoPing is the repo's ping (/ready "repo"): the jobs table answers a read.
func (s *Store) RepoPing(ctx context.Context) error {
	var one int
	err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT 1 FROM pipeline_jobs LIMIT 1) t").Scan(&one)
	if err == nil {
		return nil
	}
	if u := unavailable(CodeRepoUnavailable, err); u != err {
		return u
	}
	return &UnavailableError{Code: CodeRepoUnavailable, Reason: "error", Err: err}
}

// RepoView adapts the store to the Repo interface (whose Ping is the
// repo's).
type RepoView struct{ *Store }

// Ping is RepoPing.
func (r RepoView) Ping(ctx context.Context) error { return r.RepoPing(ctx) }

var (
	_ Queue = (*Store)(nil)
	_ Repo  = RepoView{}
)

// logJob is the logger of one job's lines: every one carries the §8
// fields (job_id, idempotency_key, symbol, asof, status, and error_code and
// attempt when set).
func (s *Store) logJob(m JobMessage, status string, err error) *slog.Logger {
	return jobLog(s.Log, m, status, err)
}

// logJobAt writes one line at level with logJob's fields, built only when
// the level is enabled: the worker writes two lines for every job, and
// building the fields of a line no one reads was a tenth of a no-op
// drain's CPU.
func (s *Store) logJobAt(ctx context.Context, level slog.Level, m JobMessage, status, msg string, args ...any) {
	if s.Log.Enabled(ctx, level) {
		s.logJob(m, status, nil).Log(ctx, level, msg, args...)
	}
}

// jobLog is logJob on l: the API logs a submit's lines on its own logger.
func jobLog(l *slog.Logger, m JobMessage, status string, err error) *slog.Logger {
	attrs := []any{"job_id", m.JobID, "idempotency_key", m.IdempotencyKey, "symbol", m.Symbol, "asof", m.Asof}
	if m.JobType != "" {
		attrs = append(attrs, "job_type", m.JobType)
	}
	if status != "" {
		attrs = append(attrs, "status", status)
	}
	if m.Attempt > 0 {
		attrs = append(attrs, "attempt", m.Attempt)
	}
	if err != nil {
		if c := ErrorCode(err); c != "" {
			attrs = append(attrs, "error_code", c)
		}
		attrs = append(attrs, "error_message", Redact(err.Error()))
	}
	return l.With(attrs...)
}
