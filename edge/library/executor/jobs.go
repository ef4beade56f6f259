package executor

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// Error codes the executor persists on jobs.
const (
	CodeLeaseExpired = "lease_expired"
	CodeScanFailed   = "scan_failed"
	CodeHashFailed   = "hash_failed"
	CodeDeleteFailed = "delete_failed"
	CodeBadPayload   = "bad_payload"
)

var (
	sqlJobRecover = mustUpdate("jobs", "recover", []Set{
		{"status", "'" + store.MustMove(store.JobMachine, store.StatusRunning, store.StatusRetryable) + "'"},
		{"worker_id", "NULL"}, {"worker_heartbeat_at", "NULL"}, {"lease_expires_at", "NULL"},
		{"error_code", "'" + CodeLeaseExpired + "'"},
		{"error_message", "'recovered: lease of worker ' || COALESCE(worker_id, '?') || ' expired'"},
		{"finished_at", "?1"}, {"updated_at", "?1"},
	}, "status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?1)")

	sqlJobClaim = mustUpdate("jobs", "claim", []Set{
		{"status", "'" + store.MustMove(store.JobMachine, store.StatusPending, store.StatusRunning) + "'"},
		{"worker_id", "?1"}, {"worker_heartbeat_at", "?2"}, {"lease_expires_at", "?3"},
		{"started_at", "?2"}, {"updated_at", "?2"},
	}, `id = (SELECT id FROM jobs WHERE status = 'pending' AND kind IN ('scan','hash','delete')
  ORDER BY created_at, id LIMIT 1) AND status = 'pending' RETURNING `+store.JobColumns)

	sqlJobHeartbeat = mustUpdate("jobs", "heartbeat", []Set{
		{"processed_items", "?1"}, {"progress", "?2"},
		{"worker_heartbeat_at", "?3"}, {"lease_expires_at", "?4"}, {"updated_at", "?3"},
	}, "id = ?5 AND worker_id = ?6 AND status = 'running' AND lease_expires_at > ?3")

	sqlJobFinish = mustUpdate("jobs", "finish", []Set{
		{"status", "?1"}, {"progress", "?2"}, {"error_code", "?3"}, {"error_message", "?4"},
		{"finished_at", "?5"}, {"worker_heartbeat_at", "?5"}, {"lease_expires_at", "NULL"}, {"updated_at", "?5"},
	}, "id = ?6 AND worker_id = ?7 AND status = 'running' AND lease_expires_at > ?5")
)

// RecoverStaleJobs is the claim-path recovery of §4.2: stale running
// scan/hash/delete jobs become retryable with lease_expired metadata.
func (x *Executor) RecoverStaleJobs(ctx context.Context) (int64, error) {
	res, err := x.exec(ctx, sqlJobRecover, x.now())
	if err != nil {
		return 0, fmt.Errorf("recover stale jobs: %w", err)
	}
	return res.RowsAffected()
}

// ClaimJob recovers stale jobs, then claims the oldest pending job.
func (x *Executor) ClaimJob(ctx context.Context) (*Claim, error) {
	x.init()
	if _, err := x.RecoverStaleJobs(ctx); err != nil {
		return nil, err
	}
	now, deadline := x.claimStamp()
	tok := x.token()
	var j store.Job
	err := x.queryRow(ctx, sqlJobClaim, func(r *sql.Row) error {
		var err error
		j, err = store.ScanJob(r)
		return err
	}, tok, now, x.leaseUntil(now))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim job: %w", err)
	}
	return &Claim{Job: j, Token: tok, Deadline: deadline, x: x}, nil
}

// Claim is a job held under lease by this executor.
type Claim struct {
	Job   store.Job
	Token string
	// Deadline is the end of the claimed lease by this process's monotonic
	// clock (see claimStamp).
	Deadline time.Time
	x        *Executor

	processed atomic.Int64
	progress  atomic.Uint64 // math.Float64bits is overkill; per-mille
}

// SetProgress records progress for the next heartbeat (fraction in [0,1]).
func (c *Claim) SetProgress(processed int64, fraction float64) {
	c.processed.Store(processed)
	if fraction < 0 {
		fraction = 0
	}
	if fraction > 1 {
		fraction = 1
	}
	c.progress.Store(uint64(fraction * 1e6))
}

func (c *Claim) fraction() float64 { return float64(c.progress.Load()) / 1e6 }

// Heartbeat extends the lease and persists progress; *lease.StaleError
// when the claim was lost.
func (c *Claim) Heartbeat(ctx context.Context) error {
	now := c.x.now()
	res, err := c.x.exec(ctx, sqlJobHeartbeat, c.processed.Load(), c.fraction(), now, c.x.leaseUntil(now), c.Job.ID, c.Token)
	if err != nil {
		return fmt.Errorf("heartbeat job %d: %w", c.Job.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return stale("jobs", c.Job.ID)
	}
	return nil
}

// Finish moves the job to status (checked against JobMachine); code and
// msg are the error metadata ("" for none).
func (c *Claim) Finish(ctx context.Context, status, code, msg string) error {
	if err := store.JobMachine.Check(store.StatusRunning, status); err != nil {
		return err
	}
	var codeV, msgV any
	if code != "" {
		codeV = code
	}
	if msg != "" {
		msgV = daemon.CapMessage(msg)
	}
	progress := c.fraction()
	if status == store.StatusCompleted {
		progress = 1
	}
	res, err := c.x.exec(ctx, sqlJobFinish, status, progress, codeV, msgV, c.x.now(), c.Job.ID, c.Token)
	if err != nil {
		return fmt.Errorf("finish job %d: %w", c.Job.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return stale("jobs", c.Job.ID)
	}
	return nil
}

// RunJobOnce claims one scan, hash or delete job and runs it to the end
// under a heartbeat. It reports whether a job was claimed.
func (x *Executor) RunJobOnce(ctx context.Context) (bool, error) {
	c, err := x.ClaimJob(ctx)
	if err != nil || c == nil {
		return false, err
	}
	log := x.Log.With("job_id", c.Job.ID, "kind", c.Job.Kind)
	var code string
	work := func(wctx context.Context) error {
		switch c.Job.Kind {
		case store.KindScan:
			code = CodeScanFailed
			return x.scan(wctx, c)
		case store.KindHash:
			code = CodeHashFailed
			var p store.HashPayload
			if err := json.Unmarshal([]byte(c.Job.Payload), &p); err != nil {
				code = CodeBadPayload
				return err
			}
			return x.hash(wctx, c, p.Algorithm)
		case store.KindDelete:
			code = CodeDeleteFailed
			return x.delete(wctx, c)
		}
		code = CodeBadPayload
		return fmt.Errorf("unknown job kind %q", c.Job.Kind)
	}
	err = lease.Keep(ctx, x.LeaseTTL, c.Heartbeat, work, lease.Until(c.Deadline))
	switch {
	case errors.Is(err, lease.ErrStale):
		log.Warn("job lease lost; abandoning", "err", err)
		return true, nil
	case ctx.Err() != nil:
		// Shutting down: leave the row running; its lease expires and
		// recovery makes it retryable.
		return true, ctx.Err()
	case err != nil:
		var refused *refusedError
		if errors.As(err, &refused) {
			code = refused.code
		} else if c.Job.Kind == store.KindDelete {
			// A delete stopped by an error (a database write that
			// failed) may have moved a file it has not recorded: it runs
			// again, as after a crash, to finish or undo that.
			log.Warn("delete job stopped on an error; it runs again to finish or undo what it began", "err", err)
			return true, c.Finish(context.WithoutCancel(ctx), store.StatusRetryable, code, err.Error())
		}
		log.Warn("job failed", "err", err)
		return true, c.Finish(context.WithoutCancel(ctx), store.StatusFailed, code, err.Error())
	}
	return true, c.Finish(context.WithoutCancel(ctx), store.StatusCompleted, "", "")
}

// refusedError finishes a job as failed with a specific error code.
type refusedError struct {
	code, msg string
}

func (e *refusedError) Error() string { return e.msg }
