package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Store is the inbox on one database.
type Store struct {
	db     *sqldb.DB
	keys   *credentials.Keyring
	policy Policy
	now    func() time.Time
	q      *lease.Queue

	listeners atomic.Pointer[[]func()]
	// credentialRace, set by tests, runs between UpdateCredentials' read
	// and its write.
	credentialRace func(ctx context.Context, tx *sql.Tx) error
}

// OnEvents registers fn to be called after every commit that inserted
// outbox events (a dispatcher's wake-up). Register before work starts; fn
// must not block.
func (s *Store) OnEvents(fn func()) {
	for {
		old := s.listeners.Load()
		var next []func()
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, fn)
		if s.listeners.CompareAndSwap(old, &next) {
			return
		}
	}
}

func (s *Store) notify() {
	if l := s.listeners.Load(); l != nil {
		for _, fn := range *l {
			fn()
		}
	}
}

// Option adjusts a Store.
type Option func(*Store)

// WithClock replaces time.Now as this process's clock (tests). The store
// still keeps time by the database's clock: the offset to it is measured
// against this clock, so moving it forward moves the store's time.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns the inbox store. keys seals and opens job credentials.
func New(db *sqldb.DB, keys *credentials.Keyring, policy Policy, opts ...Option) *Store {
	if policy.MaxAttempts <= 0 {
		policy.MaxAttempts = DefaultPolicy().MaxAttempts
	}
	s := &Store{db: db, keys: keys, policy: policy}
	for _, o := range opts {
		o(s)
	}
	// now stays nil without WithClock: the queue then takes time.Now and
	// measures the database clock again every lease.ClockResync; any
	// function given as Now is measured once, as a test clock must be.
	spec := schema.InboxLease
	spec.Returning = jobColumns
	s.q = &lease.Queue{DB: db, Spec: spec, Machine: Transitions, Now: s.now, Extra: extraDest}
	s.q.OnExpire = s.onExpire
	// Every time the store writes or compares is the database's (the
	// queue's Time: this process's clock corrected to the database clock),
	// so pods with skewed clocks agree on leases, backoff and retention.
	s.now = s.q.Time
	return s
}

// Now is the store's time: this process's clock corrected to the
// database's (lease.Queue.Time). Every time the store writes is on it.
func (s *Store) Now() time.Time { return s.now() }

// NowTx is Now for a caller about to write a time in tx, a transaction it
// holds: while the database clock was never measured, it is measured on tx
// (lease.Queue.TimeTx), since a measurement on a connection of its own
// would wait for the one tx holds.
func (s *Store) NowTx(ctx context.Context, tx *sql.Tx) (time.Time, error) {
	return s.q.TimeTx(ctx, tx)
}

// DB is the database the store runs on.
func (s *Store) DB() *sqldb.DB { return s.db }

// Policy is the retry policy in force.
func (s *Store) Policy() Policy { return s.policy }

// Queue exposes the lease queue of inbox_jobs (for sweepers and tests).
func (s *Store) Queue() *lease.Queue { return s.q }

// Insert adds a queued job inside tx, sealing its credentials to the row
// (credential_version 1). The caller owns the transaction, so an enqueue
// and its idempotency record commit together. A store whose clock was
// never measured measures it on tx (lease.Queue.TimeTx): on a connection
// of its own it would wait for the one tx holds.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, j NewJob) error {
	now, err := s.NowTx(ctx, tx)
	if err != nil {
		return fmt.Errorf("inbox: insert job: %w", err)
	}
	sched := j.ScheduledAt
	if sched.IsZero() || sched.Before(now) {
		sched = now
	}
	maxAttempts := j.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = s.policy.MaxAttempts
	}
	sealed, err := s.keys.SealStorage(j.Credentials, j.ID, j.RequesterID, 1)
	if err != nil {
		return err
	}
	rend, err := json.Marshal(j.Renditions)
	if err != nil {
		return fmt.Errorf("inbox: renditions: %w", err)
	}
	nowUS := sqldb.Micros(now)
	_, err = tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO inbox_jobs (
		id, requester_id, idempotency_key, status, priority, scheduled_at, next_attempt_at,
		max_attempts, credential_version,
		source_url, source_bucket, source_key, source_endpoint, source_region,
		output_bucket, output_prefix, output_endpoint, output_region,
		renditions, status_webhook_url, refresh_url, metadata,
		storage_creds_encrypted, storage_creds_dek_wrapped, storage_creds_kek_id, storage_creds_encryption_version,
		source_fingerprint, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		j.ID, j.RequesterID, nullStr(j.IdempotencyKey), schema.StatusQueued, j.Priority, sqldb.Micros(sched), sqldb.Micros(sched),
		maxAttempts,
		nullStr(j.Source.URL), nullStr(j.Source.Bucket), nullStr(j.Source.Key), nullStr(j.Source.Endpoint), nullStr(j.Source.Region),
		j.Output.Bucket, j.Output.Prefix, nullStr(j.Output.Endpoint), nullStr(j.Output.Region),
		string(rend), nullStr(j.StatusWebhookURL), nullStr(j.RefreshURL), nullJSON(j.Metadata),
		sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version,
		sourceFingerprint(j.ID, j.Credentials), nowUS, nowUS)
	if err != nil {
		return fmt.Errorf("inbox: insert job: %w", err)
	}
	return nil
}

// Enqueue inserts j in its own transaction (tests, tools, benchmarks).
func (s *Store) Enqueue(ctx context.Context, j NewJob) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error { return s.Insert(ctx, tx, j) })
}

// viewCols are the columns scanView reads: never a credential column.
const viewCols = `id, requester_id, status, created_at, updated_at, scheduled_at,
		next_attempt_at, started_at, finished_at, attempt_count, max_attempts, claim_version, credential_version,
		worker_id, lease_expires_at, error_code, last_error, outputs, metadata, pruned_at`

func scanView(row interface{ Scan(...any) error }) (*View, error) {
	var (
		v                                   View
		created, updated, sched             int64
		next, started, finished, leaseExp   *int64
		pruned                              *int64
		errCode, lastErr, outputs, metadata *string
	)
	err := row.Scan(
		&v.JobID, &v.RequesterID, &v.Status, &created, &updated, &sched,
		&next, &started, &finished, &v.AttemptCount, &v.MaxAttempts, &v.ClaimVersion, &v.CredentialVersion,
		&v.WorkerID, &leaseExp, &errCode, &lastErr, &outputs, &metadata, &pruned)
	if err != nil {
		return nil, err
	}
	v.CreatedAt, v.UpdatedAt, v.ScheduledAt = sqldb.FromMicros(created), sqldb.FromMicros(updated), sqldb.FromMicros(sched)
	if v.Status == schema.StatusQueued {
		v.NextAttemptAt = timePtr(next)
	}
	v.StartedAt, v.FinishedAt, v.LeaseExpiresAt = timePtr(started), timePtr(finished), timePtr(leaseExp)
	if lastErr != nil || errCode != nil {
		v.LastError = &ErrorBody{Code: deref(errCode), Message: deref(lastErr)}
	}
	if outputs != nil && v.Status == schema.StatusSucceeded {
		v.Outputs = json.RawMessage(*outputs)
	}
	if metadata != nil {
		v.Metadata = json.RawMessage(*metadata)
	}
	v.Pruned = pruned != nil
	return &v, nil
}

// Get returns the status view of a job: ErrNotFound when unknown, ErrPruned
// (with the view's identity fields) when retention removed its details.
func (s *Store) Get(ctx context.Context, jobID string) (*View, error) {
	v, err := scanView(s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT `+viewCols+` FROM inbox_jobs WHERE id = ?`), jobID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: get %s: %w", jobID, err)
	}
	if v.Pruned {
		return v, ErrPruned
	}
	return v, nil
}

// Prune removes the details (credentials, routing, metadata, outputs) of
// terminal jobs finished before cutoff, leaving a tombstone that status
// reads answer with 410 Gone. It returns the number of jobs pruned.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	now := s.now() // before the transaction holds a connection (see Store.write)
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE inbox_jobs SET pruned_at = ?,
			storage_creds_encrypted = NULL, storage_creds_dek_wrapped = NULL, storage_creds_kek_id = NULL,
			storage_creds_encryption_version = NULL, metadata = NULL, outputs = NULL, source_url = NULL,
			source_key = NULL, source_bucket = NULL, status_webhook_url = NULL, refresh_url = NULL,
			source_fingerprint = NULL
			WHERE status IN ('succeeded', 'failed', 'dead_letter') AND finished_at < ? AND pruned_at IS NULL`),
			sqldb.Micros(now), sqldb.Micros(cutoff))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("inbox: prune: %w", err)
	}
	return n, nil
}

func nullStr(v string) any {
	if v == "" {
		return nil
	}
	return v
}

func nullJSON(v json.RawMessage) any {
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return string(v)
}

func timePtr(us *int64) *time.Time {
	if us == nil {
		return nil
	}
	t := sqldb.FromMicros(*us)
	return &t
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
