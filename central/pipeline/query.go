package pipeline

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

const recordCols = `job_id, idempotency_key, job_type, symbol, asof, requested_by, status, attempt_count, max_attempts,
	created_at, updated_at, visible_at, started_at, finished_at, error_code, error_message, error_attempt, result_ref`

type scanner interface{ Scan(dest ...any) error }

func scanRecord(r scanner) (JobRecord, error) {
	var j JobRecord
	var created, updated int64
	var visible, started, finished *int64
	var code, msg, ref *string
	var errAttempt *int
	err := r.Scan(&j.JobID, &j.IdempotencyKey, &j.JobType, &j.Symbol, &j.Asof, &j.RequestedBy, &j.Status, &j.Attempts, &j.MaxAttempts,
		&created, &updated, &visible, &started, &finished, &code, &msg, &errAttempt, &ref)
	if err != nil {
		return j, err
	}
	j.CreatedAt, j.UpdatedAt = sqldb.FromMicros(created), sqldb.FromMicros(updated)
	j.VisibleAt, j.StartedAt, j.FinishedAt = microsTime(visible), microsTime(started), microsTime(finished)
	if j.Status != StatusQueued {
		j.VisibleAt = nil
	}
	if j.Status == StatusRunning {
		j.StartedAt = &j.UpdatedAt // the claim's time, until the attempt ends
	}
	if code != nil {
		j.LastError = &LastError{ErrorCode: *code, ErrorMessage: orZero(msg), Attempt: orZero(errAttempt)}
	}
	j.ResultRef = orZero(ref)
	return j, nil
}

// microsTime is a nullable time column (microseconds) as a time, nil for
// NULL.
func microsTime(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := sqldb.FromMicros(*v)
	return &t
}

// orZero is a nullable column's value, the zero value for NULL.
func orZero[T any](v *T) T {
	if v == nil {
		var zero T
		return zero
	}
	return *v
}

// IsJobID reports whether id has the shape of a job id (a UUID in its
// canonical 36-character form, as NewJobID makes them). Anything else —
// including bytes that are not UTF-8, which Postgres refuses as a parameter
// — names no job, and is answered ErrNotFound without a query, the same on
// both engines.
func IsJobID(id string) bool {
	return len(id) == 36 && uuid.Validate(id) == nil
}

// jobKey is id in the canonical form job ids are stored under (NewJobID's,
// lower case), for an id in any form uuid.Parse reads (UUIDs are
// case-insensitive); false for anything that is not a UUID, which names no
// job.
func jobKey(id string) (string, bool) {
	if len(id) > 45 { // the longest form uuid.Parse reads (urn:uuid:…)
		return "", false
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return "", false
	}
	return u.String(), true
}

// GetByID is get_by_id.
func (s *Store) GetByID(ctx context.Context, id string) (JobRecord, error) {
	id, ok := jobKey(id)
	if !ok {
		return JobRecord{}, ErrNotFound
	}
	j, err := scanRecord(s.DB.QueryRowContext(ctx, s.DB.Rebind("SELECT "+recordCols+" FROM pipeline_jobs WHERE job_id = ?"), id))
	if errors.Is(err, sql.ErrNoRows) {
		return j, ErrNotFound
	}
	return j, unavailable(CodeRepoUnavailable, err)
}

// GetByIdempotency is get_by_idempotency: the key's active job (queued,
// running or succeeded), if any.
func (s *Store) GetByIdempotency(ctx context.Context, key string) (string, bool, error) {
	var id string
	err := s.DB.QueryRowContext(ctx, s.DB.Rebind("SELECT job_id FROM pipeline_jobs WHERE idempotency_key = ? AND status IN ("+activeList+")"), key).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, unavailable(CodeRepoUnavailable, err)
	}
	return id, true, nil
}

// Filter selects a page of jobs; empty fields match everything.
type Filter struct {
	Status, JobType, Symbol string
	Asof                    string // one day, YYYY-MM-DD
	Cursor                  string // opaque, from Page.NextCursor
	Limit                   int
}

// ListStatuses are the statuses a Filter selects by.
var ListStatuses = []string{StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusDeadLetter}

// FilterError is a Filter value no job can have: the API and the console
// answer it 400 with Message, rather than a page that reads as "no jobs".
type FilterError struct{ Message string }

func (e *FilterError) Error() string { return "pipeline: invalid filter: " + e.Message }

// Check refuses a filter value out of shape: a job_type, symbol or asof
// that is not UTF-8 text (or holds NUL), an asof that is not a day, a
// status that is not one of ListStatuses. The cursor is List's to judge
// (ErrBadCursor).
func (f Filter) Check() error {
	for _, p := range []struct{ name, v string }{{"job_type", f.JobType}, {"symbol", f.Symbol}, {"asof", f.Asof}} {
		if !sqldb.IsText(p.v) {
			return &FilterError{Message: p.name + " must be UTF-8 text"}
		}
	}
	if f.Asof != "" && checkAsof(f.Asof) != nil {
		return &FilterError{Message: asofShape}
	}
	if f.Status != "" && !slices.Contains(ListStatuses, f.Status) {
		return &FilterError{Message: "status must be one of " + strings.Join(ListStatuses, ", ")}
	}
	return nil
}

// Page is one keyset page, newest first.
type Page struct {
	Jobs       []JobRecord `json:"jobs"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// ErrBadCursor is returned for a cursor List did not make.
var ErrBadCursor = errors.New("pipeline: invalid cursor")

// List returns jobs matching f, newest first (job ids are UUIDv7), a page
// at a time: the cursor is the last id of the previous page.
func (s *Store) List(ctx context.Context, f Filter) (Page, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	var cursor []byte
	if f.Cursor != "" {
		// The cursor is the last job id of a page: anything else (bytes
		// that are not UTF-8 among them) was not made by List.
		var err error
		cursor, err = base64.RawURLEncoding.DecodeString(f.Cursor)
		if err != nil || !IsJobID(string(cursor)) {
			return Page{}, ErrBadCursor
		}
	}
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"status", f.Status}, {"job_type", f.JobType}, {"symbol", f.Symbol}, {"asof", f.Asof}} {
		if !sqldb.IsText(c.v) {
			// No job has such a value (submits are UTF-8 text), and
			// Postgres would refuse the parameter: no page, on both
			// engines. The API refuses it first (400 invalid_request).
			return Page{Jobs: []JobRecord{}}, nil
		}
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if cursor != nil {
		where = append(where, "job_id < ?")
		args = append(args, string(cursor))
	}
	q := "SELECT " + recordCols + " FROM pipeline_jobs"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY job_id DESC LIMIT ?"
	args = append(args, f.Limit+1)
	rows, err := s.DB.QueryContext(ctx, s.DB.Rebind(q), args...)
	if err != nil {
		return Page{}, unavailable(CodeRepoUnavailable, err)
	}
	defer rows.Close()
	p := Page{Jobs: []JobRecord{}}
	for rows.Next() {
		j, err := scanRecord(rows)
		if err != nil {
			return Page{}, err
		}
		p.Jobs = append(p.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return Page{}, unavailable(CodeRepoUnavailable, err)
	}
	if len(p.Jobs) > f.Limit {
		p.Jobs = p.Jobs[:f.Limit]
		p.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(p.Jobs[f.Limit-1].JobID))
	}
	return p, nil
}

// Redrive takes a dead-lettered job back to the queue, visible now, with a
// fresh attempt budget; a new claim_version fences out anything that still
// held it. ErrConflict when another job of its key became active meanwhile
// (the unique index says so); a *lease.TransitionError for a job that is
// not dead-lettered.
func (s *Store) Redrive(ctx context.Context, id string) (JobRecord, error) {
	id, ok := jobKey(id)
	if !ok {
		return JobRecord{}, ErrNotFound
	}
	now := sqldb.Micros(s.now())
	var rec JobRecord
	err := s.DB.Tx(ctx, func(tx *sql.Tx) error {
		var st string
		if err := s.DB.QueryRowTx(ctx, tx, "SELECT status FROM pipeline_jobs WHERE job_id = ?", id).Scan(&st); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return ErrNotFound
			}
			return err
		}
		if st != StatusDeadLetter {
			return &lease.TransitionError{Machine: Transitions.Machine, From: st, To: StatusQueued, Reason: "only a dead-lettered job is redriven"}
		}
		if err := Transitions.Check(st, StatusQueued); err != nil {
			return err
		}
		res, err := s.DB.ExecTx(ctx, tx, `UPDATE pipeline_jobs SET status = ?, visible_at = ?, updated_at = ?, redriven_at = ?,
			attempt_count = 0, finished_at = NULL, claim_version = claim_version + 1, worker_id = NULL, lease_expires_at = NULL
			WHERE job_id = ? AND status = ?`, StatusQueued, now, now, now, id, StatusDeadLetter)
		if err != nil {
			return err
		}
		// On Postgres a concurrent redrive of the same job passes the read
		// above, waits for the first one's row lock, then finds the row no
		// longer dead-lettered: it changed nothing, and says so as SQLite
		// (which serializes the two) does.
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n != 1 {
			if err := s.DB.QueryRowTx(ctx, tx, "SELECT status FROM pipeline_jobs WHERE job_id = ?", id).Scan(&st); err != nil {
				return err
			}
			return &lease.TransitionError{Machine: Transitions.Machine, From: st, To: StatusQueued, Reason: "only a dead-lettered job is redriven; another redrive took it first"}
		}
		// The record as this redrive left it, read before the commit: a
		// worker may claim the job the moment it is queued, and the answer
		// is what the redrive did (queued), not what happened next.
		rec, err = scanRecord(s.DB.QueryRowTx(ctx, tx, "SELECT "+recordCols+" FROM pipeline_jobs WHERE job_id = ?", id))
		return err
	})
	switch {
	case sqldb.IsUniqueViolation(err):
		return JobRecord{}, ErrConflict
	case err != nil:
		if errors.Is(err, ErrNotFound) {
			return JobRecord{}, err
		}
		return JobRecord{}, unavailable(CodeRepoUnavailable, err)
	}
	return rec, nil
}

// Counts are the gauges of /metrics: queued (backlog) and dead-lettered.
func (s *Store) Counts(ctx context.Context) (backlog, dlq int64, err error) {
	err = s.DB.QueryRowContext(ctx, s.DB.Rebind(`SELECT
		(SELECT COUNT(*) FROM pipeline_jobs WHERE status = ?),
		(SELECT COUNT(*) FROM pipeline_jobs WHERE status = ?)`), StatusQueued, StatusDeadLetter).Scan(&backlog, &dlq)
	return backlog, dlq, err
}

// DayCount is the number of jobs of one day, symbol and status.
type DayCount struct {
	Asof, Symbol, Status string
	Jobs                 int64
}

// ByDay counts jobs by day, symbol and status for the latest days (1-366,
// default 14) that have jobs: the console's overview of the pipeline.
func (s *Store) ByDay(ctx context.Context, days int) ([]DayCount, error) {
	if days <= 0 || days > 366 {
		days = 14
	}
	rows, err := s.DB.QueryContext(ctx, s.DB.Rebind(`SELECT asof, symbol, status, COUNT(*) FROM pipeline_jobs
		WHERE asof IN (SELECT DISTINCT asof FROM pipeline_jobs ORDER BY asof DESC LIMIT ?)
		GROUP BY asof, symbol, status ORDER BY asof DESC, symbol, status`), days)
	if err != nil {
		return nil, unavailable(CodeRepoUnavailable, err)
	}
	defer rows.Close()
	out := []DayCount{}
	for rows.Next() {
		var d DayCount
		if err := rows.Scan(&d.Asof, &d.Symbol, &d.Status, &d.Jobs); err != nil {
			return nil, unavailable(CodeRepoUnavailable, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable(CodeRepoUnavailable, err)
	}
	return out, nil
}
