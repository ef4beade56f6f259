package policy

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// DeleteRequest is what a user selected for one group.
type DeleteRequest struct {
	KeepFileIDs   []int64 `json:"keep_file_ids"`
	DeleteFileIDs []int64 `json:"delete_file_ids"`
	Permanent     bool    `json:"permanent"`
}

// RequestDelete authorises a deletion in group k and enqueues, in one
// transaction, the delete job that carries it out and a thumbnail cleanup
// for the group. It
// returns store.ErrNotFound for an unknown group or id, ErrInvalid for a
// malformed selection and ErrConflict when an id is not a current member.
func (p *Policy) RequestDelete(ctx context.Context, k store.GroupKey, r DeleteRequest) (store.Job, error) {
	if len(r.KeepFileIDs) == 0 {
		return store.Job{}, fmt.Errorf("%w: keep_file_ids must name at least one file (the last copy is never deleted)", ErrInvalid)
	}
	if len(r.DeleteFileIDs) == 0 {
		return store.Job{}, fmt.Errorf("%w: delete_file_ids is empty", ErrInvalid)
	}
	if len(r.KeepFileIDs)+len(r.DeleteFileIDs) > 10000 {
		return store.Job{}, fmt.Errorf("%w: at most 10000 ids per request", ErrInvalid)
	}
	seen := map[int64]string{}
	for _, set := range []struct {
		name string
		ids  []int64
	}{{"keep_file_ids", r.KeepFileIDs}, {"delete_file_ids", r.DeleteFileIDs}} {
		for _, id := range set.ids {
			if id <= 0 {
				return store.Job{}, fmt.Errorf("%w: %s has a non-positive id %d", ErrInvalid, set.name, id)
			}
			if prev, dup := seen[id]; dup {
				return store.Job{}, fmt.Errorf("%w: file %d appears in %s and %s", ErrInvalid, id, prev, set.name)
			}
			seen[id] = set.name
		}
	}
	n, err := p.Store.GroupSize(ctx, k)
	if err != nil {
		return store.Job{}, err
	}
	if n < 2 {
		return store.Job{}, fmt.Errorf("duplicate group %s: %w", k, store.ErrNotFound)
	}
	for id := range seen {
		f, err := p.Store.GetFile(ctx, id)
		if err != nil {
			return store.Job{}, err
		}
		if f.IsMissing || f.NeedsHash || f.HashAlgorithm == nil || f.ContentHash == nil ||
			*f.HashAlgorithm != k.Algorithm || *f.ContentHash != k.HashHex {
			return store.Job{}, fmt.Errorf("%w: file %d is not a current member of group %s", ErrConflict, id, k)
		}
	}
	// One transaction: a delete without its cleanup would leave the
	// deleted copies' thumbnails behind for ever, and a cleanup without
	// its delete would remove the group's thumbnails for nothing. The
	// cleanup is not claimed while the delete is unfinished (the
	// executor's claim): a delete queued behind a long scan would
	// otherwise run after it, and the thumbnails of the copies it removes
	// would stay.
	var j store.Job
	err = p.Store.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		j, err = p.insertJobIn(ctx, tx, store.KindDelete, map[string]any{
			"group_key": k.String(), "keep_file_ids": r.KeepFileIDs, "delete_file_ids": r.DeleteFileIDs, "permanent": r.Permanent,
		})
		if err != nil {
			return err
		}
		return p.scheduleCleanupIn(ctx, tx, k.String(), p.CleanupDelay)
	})
	if err != nil {
		return store.Job{}, err
	}
	p.wake()
	return j, nil
}

// ScheduleCleanup adds a pending cleanup of group's thumbnails due after
// delay, unless one is already pending for the group.
func (p *Policy) ScheduleCleanup(ctx context.Context, group string, delay time.Duration) error {
	err := p.scheduleCleanupIn(ctx, p.Store.DB, group, delay)
	if err == nil {
		p.wake()
	}
	return err
}

func (p *Policy) scheduleCleanupIn(ctx context.Context, q querier, group string, delay time.Duration) error {
	now := p.Store.NowMS()
	_, err := q.ExecContext(ctx, `INSERT INTO thumbnail_cleanup_jobs(group_key, status, execute_after, created_at, updated_at)
SELECT ?1, 'pending', ?2, ?3, ?3 WHERE NOT EXISTS
  (SELECT 1 FROM thumbnail_cleanup_jobs WHERE group_key = ?1 AND status = 'pending')`, group, now+delay.Milliseconds(), now)
	if err != nil {
		return fmt.Errorf("schedule thumbnail cleanup of %s: %w", group, err)
	}
	return nil
}
