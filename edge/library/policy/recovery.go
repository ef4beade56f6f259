package policy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// CodeLeaseExpired is the recovery error code of a stale job.
const CodeLeaseExpired = "lease_expired"

// RecoverStaleJobs is control-plane recovery (§4.2): running jobs whose
// lease has expired become retryable, lease owner fields cleared, with the
// same deterministic metadata the executor's claim path writes.
func (p *Policy) RecoverStaleJobs(ctx context.Context) (int64, error) {
	store.MustMove(store.JobMachine, store.StatusRunning, store.StatusRetryable)
	now := p.Store.NowMS()
	res, err := p.Store.DB.ExecContext(ctx, `UPDATE jobs SET status = 'retryable', worker_id = NULL,
  worker_heartbeat_at = NULL, lease_expires_at = NULL, error_code = ?2,
  error_message = 'recovered: lease of worker ' || COALESCE(worker_id, '?') || ' expired',
  finished_at = ?1, updated_at = ?1
WHERE status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?1)`, now, CodeLeaseExpired)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// RequeueRetryable gives each retryable job a jittered retry time, then
// moves due ones back to pending (retry_count+1), or, for a scan or a
// hash, to failed once MaxJobRetries is spent (0: at its first recovery). A scan/hash row that would break the
// single-active rule stays retryable until the slot is free.
func (p *Policy) RequeueRetryable(ctx context.Context, b lease.Backoff) error {
	now := p.Store.NowMS()
	rows, err := p.Store.DB.QueryContext(ctx, `SELECT id, kind, retry_count, retry_after FROM jobs WHERE status = 'retryable' ORDER BY id`)
	if err != nil {
		return err
	}
	type row struct {
		id, n int64
		kind  string
		after *int64
	}
	var todo []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.kind, &r.n, &r.after); err != nil {
			rows.Close()
			return err
		}
		todo = append(todo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range todo {
		switch {
		// A delete never gives up: a run stopped half-way may have left a
		// file under its staging name or in the trash unrecorded, and only
		// a run of the same job finishes or undoes that. A job that will
		// not run again fails at once rather than after a backoff.
		case r.n >= int64(max(p.MaxJobRetries, 0)) && r.kind != store.KindDelete:
			store.MustMove(store.JobMachine, store.StatusRetryable, store.StatusFailed)
			_, err = p.Store.DB.ExecContext(ctx, `UPDATE jobs SET status = 'failed', updated_at = ?,
  error_message = 'gave up after ' || retry_count || ' retries: ' || COALESCE(error_message, '')
WHERE id = ? AND status = 'retryable'`, now, r.id)
		case r.after == nil:
			_, err = p.Store.DB.ExecContext(ctx, `UPDATE jobs SET retry_after = ? WHERE id = ? AND status = 'retryable'`,
				now+b.Delay(int(r.n)+1).Milliseconds(), r.id)
		case *r.after > now:
			continue
		default:
			store.MustMove(store.JobMachine, store.StatusRetryable, store.StatusPending)
			// A pending job has not finished: finished_at goes; its last
			// error stays, as history, until its next finish replaces it.
			_, err = p.Store.DB.ExecContext(ctx, `UPDATE jobs SET status = 'pending', retry_count = retry_count + 1,
  retry_after = NULL, finished_at = NULL, updated_at = ? WHERE id = ? AND status = 'retryable'`, now, r.id)
			if IsUnique(err) {
				err = nil // the single active slot is taken; try again later
			} else if err == nil {
				p.wake()
			}
		}
		if err != nil {
			return fmt.Errorf("requeue job %d: %w", r.id, err)
		}
	}
	return nil
}

// RequeueFailedThumbnails moves failed thumbnails whose retry_after has
// passed back to pending, within the attempt limit and queue capacity.
func (p *Policy) RequeueFailedThumbnails(ctx context.Context) (int64, error) {
	store.MustMove(store.ThumbnailMachine, store.StatusFailed, store.StatusPending)
	now := p.Store.NowMS()
	max := p.ThumbMaxAttempts
	if max <= 0 {
		max = 1 << 30
	}
	res, err := p.Store.DB.ExecContext(ctx, `UPDATE thumbnails SET status = 'pending', updated_at = ?1
WHERE id IN (SELECT id FROM thumbnails WHERE status = 'failed' AND retry_after IS NOT NULL AND retry_after <= ?1
  AND error_count < ?2 ORDER BY retry_after, id
  LIMIT max(0, ?3 - (SELECT COUNT(*) FROM thumbnails WHERE status IN ('pending','running'))))`, now, max, p.ThumbQueueCapacity)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		p.wake()
	}
	return n, nil
}

// AutoHash enqueues a hash job when the latest scan/hash job is a
// completed scan and files need hashing: each scan is followed by one hash
// pass, and a file that cannot be hashed does not cause endless jobs. It
// also enqueues one, after any completed scan or hash job, while files
// hashed with another algorithm than the configured one remain: that is
// how a changed EUTERPE_LIBRARY_HASH re-hashes the library without waiting
// for a file to change. EnqueueHash marks those files, so once a pass with
// the configured algorithm has run none remain (a file it could not read
// keeps needs_hash = 1 and waits for the next scan).
func (p *Policy) AutoHash(ctx context.Context) (bool, error) {
	var kind, status string
	err := p.Store.DB.QueryRowContext(ctx, `SELECT kind, status FROM jobs WHERE kind IN ('scan','hash')
ORDER BY id DESC LIMIT 1`).Scan(&kind, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("latest scan/hash job: %w", err)
	}
	if status != store.StatusCompleted {
		return false, nil
	}
	need := false
	if kind == store.KindScan {
		n, _, err := p.Store.PendingHashWork(ctx)
		if err != nil {
			return false, fmt.Errorf("pending hash work: %w", err)
		}
		need = n > 0
	}
	if !need {
		if need, err = p.Store.HashedWithOtherAlgorithm(ctx, p.hashAlgorithm()); err != nil || !need {
			return false, err
		}
	}
	_, err = p.EnqueueHash(ctx)
	if errors.Is(err, ErrActive) {
		return false, nil
	}
	return err == nil, err
}

// CheckWAL enqueues a checkpoint of mode when the WAL file at walPath has
// grown past threshold bytes and no checkpoint is queued or running.
func (p *Policy) CheckWAL(ctx context.Context, walPath string, threshold int64, mode string) (bool, error) {
	if threshold <= 0 {
		return false, nil
	}
	st, err := os.Stat(walPath)
	if err != nil || st.Size() <= threshold {
		return false, nil
	}
	var n int
	if err := p.Store.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM wal_maintenance_jobs
WHERE status IN ('pending','running','retryable')`).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		return false, nil
	}
	_, err = p.EnqueueWAL(ctx, mode)
	return err == nil, err
}

// Scheduler runs the periodic policy duties.
type Scheduler struct {
	Policy   *Policy
	Log      *slog.Logger
	Interval time.Duration
	Backoff  lease.Backoff
	WALPath  string
	WALBytes int64
	WALMode  string
	AutoHash bool
}

// Tick runs every duty once.
func (s *Scheduler) Tick(ctx context.Context) error {
	p := s.Policy
	if _, err := p.RecoverStaleJobs(ctx); err != nil {
		return fmt.Errorf("recover stale jobs: %w", err)
	}
	// After the jobs: a scan whose lease was just recovered (its process
	// killed) has its session closed in the same tick, and the first tick
	// after a restart closes those whose job was recovered meanwhile.
	if _, err := p.Store.CloseStaleScanSessions(ctx); err != nil {
		return err
	}
	if err := p.RequeueRetryable(ctx, s.Backoff); err != nil {
		return err
	}
	if _, err := p.RequeueFailedThumbnails(ctx); err != nil {
		return fmt.Errorf("requeue thumbnails: %w", err)
	}
	if s.AutoHash {
		if _, err := p.AutoHash(ctx); err != nil {
			return fmt.Errorf("auto hash: %w", err)
		}
	}
	if _, err := p.CheckWAL(ctx, s.WALPath, s.WALBytes, s.WALMode); err != nil {
		return fmt.Errorf("wal check: %w", err)
	}
	return nil
}

// Run ticks every Interval until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	if s.Interval <= 0 {
		s.Interval = 2 * time.Second
	}
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if err := s.Tick(ctx); err != nil && ctx.Err() == nil && s.Log != nil {
			s.Log.Warn("library policy tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
