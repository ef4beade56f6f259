package executor

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// WAL maintenance error codes.
const (
	CodeCheckpointBusy   = "checkpoint_busy"
	CodeCheckpointFailed = "checkpoint_failed"
	CodeBadMode          = "bad_mode"
)

var (
	sqlWALRecover = mustUpdate("wal_maintenance_jobs", "recover", []Set{
		{"status", "'" + store.MustMove(store.WALMachine, store.StatusRunning, store.StatusRetryable) + "'"},
		{"retry_count", "retry_count + 1"}, {"retry_after", "?2"},
		{"worker_id", "NULL"}, {"worker_heartbeat_at", "NULL"}, {"lease_expires_at", "NULL"},
		{"error_code", "'" + CodeLeaseExpired + "'"},
		{"error_message", "'recovered: lease expired while running'"},
		{"finished_at", "?1"}, {"updated_at", "?1"},
	}, "id = ?3 AND status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?1)")

	sqlWALClaim = mustUpdate("wal_maintenance_jobs", "claim", []Set{
		{"status", "'" + store.MustMove(store.WALMachine, store.StatusPending, store.StatusRunning) + "'"},
		{"worker_id", "?1"}, {"worker_heartbeat_at", "?2"}, {"lease_expires_at", "?3"},
		{"started_at", "?2"}, {"updated_at", "?2"}, {"finished_at", "NULL"},
	}, `id = (SELECT id FROM wal_maintenance_jobs
  WHERE (status = 'pending' AND execute_after <= ?2) OR (status = 'retryable' AND COALESCE(retry_after, 0) <= ?2)
  ORDER BY id LIMIT 1) AND status IN ('pending','retryable')
RETURNING id, requested_mode, retry_count`)

	sqlWALHeartbeat = mustUpdate("wal_maintenance_jobs", "heartbeat", []Set{
		{"worker_heartbeat_at", "?1"}, {"lease_expires_at", "?2"}, {"updated_at", "?1"},
	}, "id = ?3 AND worker_id = ?4 AND status = 'running' AND lease_expires_at > ?1")

	sqlWALSuccess = mustUpdate("wal_maintenance_jobs", "success", []Set{
		{"status", "'" + store.MustMove(store.WALMachine, store.StatusRunning, store.StatusCompleted) + "'"},
		{"checkpoint_busy", "?1"}, {"checkpoint_log_frames", "?2"}, {"checkpointed_frames", "?3"},
		{"error_code", "NULL"}, {"error_message", "NULL"},
		{"finished_at", "?4"}, {"worker_heartbeat_at", "?4"}, {"lease_expires_at", "NULL"}, {"updated_at", "?4"},
	}, "id = ?5 AND worker_id = ?6 AND status = 'running' AND lease_expires_at > ?4")

	sqlWALRetry = mustUpdate("wal_maintenance_jobs", "retry", []Set{
		{"status", "'" + store.MustMove(store.WALMachine, store.StatusRunning, store.StatusRetryable) + "'"},
		{"retry_count", "retry_count + 1"}, {"retry_after", "?7"},
		{"checkpoint_busy", "?1"}, {"checkpoint_log_frames", "?2"}, {"checkpointed_frames", "?3"},
		{"error_code", "'" + CodeCheckpointBusy + "'"}, {"error_message", "'checkpoint could not complete: database busy'"},
		{"finished_at", "?4"}, {"worker_heartbeat_at", "?4"}, {"lease_expires_at", "NULL"}, {"updated_at", "?4"},
	}, "id = ?5 AND worker_id = ?6 AND status = 'running' AND lease_expires_at > ?4")

	sqlWALFailure = mustUpdate("wal_maintenance_jobs", "failure", []Set{
		{"status", "'" + store.MustMove(store.WALMachine, store.StatusRunning, store.StatusFailed) + "'"},
		{"error_code", "?1"}, {"error_message", "?2"},
		{"finished_at", "?3"}, {"worker_heartbeat_at", "?3"}, {"lease_expires_at", "NULL"}, {"updated_at", "?3"},
	}, "id = ?4 AND worker_id = ?5 AND status = 'running' AND lease_expires_at > ?3")
)

// RecoverStaleWAL is the §4.5 claim-path recovery: stale running rows
// become retryable with lease_expired metadata, retry_count+1 and a backoff
// retry_after.
func (x *Executor) RecoverStaleWAL(ctx context.Context) (int64, error) {
	x.init()
	now := x.now()
	rows, err := x.Store.DB.QueryContext(ctx, `SELECT id, retry_count FROM wal_maintenance_jobs
WHERE status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?)`, now)
	if err != nil {
		return 0, err
	}
	type row struct{ id, n int64 }
	var todo []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.n); err != nil {
			rows.Close()
			return 0, err
		}
		todo = append(todo, r)
	}
	rows.Close()
	var total int64
	for _, r := range todo {
		res, err := x.exec(ctx, sqlWALRecover, now, now+x.Retry.Delay(int(r.n)+1).Milliseconds(), r.id)
		if err != nil {
			return total, err
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// Checkpoint modes accepted by PRAGMA wal_checkpoint.
var checkpointModes = map[string]string{
	store.ModePassive: "PASSIVE", store.ModeRestart: "RESTART", store.ModeTruncate: "TRUNCATE",
}

// RunWALOnce claims one due WAL maintenance row and checkpoints.
func (x *Executor) RunWALOnce(ctx context.Context) (bool, error) {
	if _, err := x.RecoverStaleWAL(ctx); err != nil {
		return false, err
	}
	now, deadline := x.claimStamp()
	tok := x.token()
	var id, retries int64
	var mode string
	err := x.queryRow(ctx, sqlWALClaim, func(r *sql.Row) error { return r.Scan(&id, &mode, &retries) }, tok, now, x.leaseUntil(now))
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim wal maintenance: %w", err)
	}
	renew := func(ctx context.Context) error {
		now := x.now()
		res, err := x.exec(ctx, sqlWALHeartbeat, now, x.leaseUntil(now), id, tok)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return stale("wal_maintenance_jobs", id)
		}
		return nil
	}
	var busy, logFrames, done int64
	err = lease.Keep(ctx, x.LeaseTTL, renew, func(ctx context.Context) error {
		m, ok := checkpointModes[strings.ToLower(mode)]
		if !ok {
			return &refusedError{code: CodeBadMode, msg: fmt.Sprintf("unknown checkpoint mode %q", mode)}
		}
		return x.checkpoint(ctx, m, &busy, &logFrames, &done)
	}, lease.Until(deadline))
	if errors.Is(err, lease.ErrStale) {
		return true, nil
	}
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	bg := context.WithoutCancel(ctx)
	now = x.now()
	var res sql.Result
	switch {
	case err != nil:
		code := CodeCheckpointFailed
		var re *refusedError
		if errors.As(err, &re) {
			code = re.code
		}
		res, err = x.exec(bg, sqlWALFailure, code, daemon.CapMessage(err.Error()), now, id, tok)
	case busy > 0:
		// §4.5: a busy checkpoint is always retryable, its stats kept; only
		// an execution error fails. Readers that keep the WAL pinned for long
		// only make the retries rarer.
		res, err = x.exec(bg, sqlWALRetry, busy, logFrames, done, now, id, tok,
			now+x.walBackoff(retries+1).Milliseconds())
	default:
		res, err = x.exec(bg, sqlWALSuccess, busy, logFrames, done, now, id, tok)
	}
	if err != nil {
		return true, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return true, stale("wal_maintenance_jobs", id)
	}
	return true, nil
}

// walBackoff is the wait before retrying a checkpoint that was busy on its
// attempt-th try: the regular backoff before the MaxWALRetries-th attempt,
// from then on the backoff's larger bucket, so a reader that pins the WAL for hours is polled
// seldom rather than given up on (the row stays due for the policy's
// CheckWAL, which schedules no second checkpoint meanwhile).
func (x *Executor) walBackoff(attempt int64) time.Duration {
	if attempt < int64(x.MaxWALRetries) {
		return x.Retry.Delay(int(attempt))
	}
	return x.Retry.Larger(int(attempt))
}

// checkpoint runs PRAGMA wal_checkpoint on a dedicated connection whose
// busy timeout is CheckpointBusyTimeout, so a checkpoint blocked by readers
// reports busy instead of holding the worker for the pool's long timeout.
func (x *Executor) checkpoint(ctx context.Context, mode string, busy, logFrames, done *int64) error {
	conn, err := x.Store.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	ms := x.CheckpointBusyTimeout.Milliseconds()
	if ms <= 0 {
		ms = 2000
	}
	// The connection goes back to the pool afterwards, so it must leave with
	// the timeout it came with (the DSN's), not a guess at it.
	var prev int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&prev); err != nil {
		return fmt.Errorf("read busy_timeout: %w", err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", ms)); err != nil {
		return fmt.Errorf("set busy_timeout: %w", err)
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", prev)); err != nil {
			// A pooled connection with the short timeout would make ordinary
			// writers fail as busy: drop it from the pool instead.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(busy, logFrames, done)
}
