package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
)

// DefaultHeldCleanupWarn is how often the log repeats, for one group,
// that its thumbnail cleanup waits for a delete that keeps failing.
const DefaultHeldCleanupWarn = time.Hour

// heldCleanupFiles bounds the paths a held-cleanup warning names.
const heldCleanupFiles = 10

// sqlCleanupHeld finds the due cleanups that sqlCleanupClaim passes over
// for an unfinished delete of their group that has already failed (a
// retryable error is kept on the row, as history, while it waits and runs
// again). A delete is retried until it ends, so one failing for good holds
// its group's thumbnails back for ever.
const sqlCleanupHeld = `SELECT c.group_key, j.id, j.payload, j.retry_count, j.error_message
FROM thumbnail_cleanup_jobs c JOIN jobs j ON j.kind = 'delete'
  AND j.status IN ('pending','running','retryable') AND j.error_message IS NOT NULL AND j.error_message <> ''
  AND CASE WHEN json_valid(j.payload) THEN json_extract(j.payload, '$.group_key') END = c.group_key
WHERE c.status = 'pending' AND c.execute_after <= ?1
ORDER BY c.group_key, j.id`

// heldCleanup is a due cleanup and the failing delete of its group that
// holds it back.
type heldCleanup struct {
	group, payload, lastErr string
	job, retries            int64
}

// warnHeldCleanups logs, once per group every heldWarnEvery
// (DefaultHeldCleanupWarn), each due thumbnail cleanup held back by a
// delete of its group that keeps failing: without it the thumbnails of
// the group's copies silently stay, however long the delete fails.
func (x *Executor) warnHeldCleanups(ctx context.Context) error {
	held, err := x.heldCleanups(ctx)
	if err != nil {
		return fmt.Errorf("cleanups held by a delete: %w", err)
	}
	every := x.heldWarnEvery
	if every <= 0 {
		every = DefaultHeldCleanupWarn
	}
	now := time.Now()
	x.heldMu.Lock()
	defer x.heldMu.Unlock()
	for g, at := range x.heldWarned {
		if now.Sub(at) >= every {
			delete(x.heldWarned, g)
		}
	}
	for _, h := range held {
		if _, warned := x.heldWarned[h.group]; warned {
			continue
		}
		if x.heldWarned == nil {
			x.heldWarned = map[string]time.Time{}
		}
		x.heldWarned[h.group] = now
		x.Log.Warn("thumbnail cleanup of a duplicate group waits for a failed delete of the group, which is retried until it ends; the group's thumbnails stay until then",
			"group", h.group, "job", h.job, "files", x.deleteFiles(ctx, h.payload), "retries", h.retries,
			"err", daemon.CapMessage(daemon.RedactURL(h.lastErr)))
	}
	return nil
}

// heldCleanups returns the due cleanups held back by a failing delete,
// the first such delete of each group.
func (x *Executor) heldCleanups(ctx context.Context) ([]heldCleanup, error) {
	rows, err := x.Store.DB.QueryContext(ctx, sqlCleanupHeld, x.now())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []heldCleanup
	for rows.Next() {
		var h heldCleanup
		if err := rows.Scan(&h.group, &h.job, &h.payload, &h.retries, &h.lastErr); err != nil {
			return nil, err
		}
		if len(out) > 0 && out[len(out)-1].group == h.group {
			continue
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// deleteFiles returns the catalogued paths of the files payload asks to
// delete (their ids where a path cannot be read), at most
// heldCleanupFiles of them.
func (x *Executor) deleteFiles(ctx context.Context, payload string) []string {
	var p DeletePayload
	_ = json.Unmarshal([]byte(payload), &p) // the query took valid JSON only
	out := make([]string, 0, min(len(p.DeleteFileIDs), heldCleanupFiles))
	for _, id := range p.DeleteFileIDs[:min(len(p.DeleteFileIDs), heldCleanupFiles)] {
		f, err := x.Store.GetFile(ctx, id)
		if err != nil {
			out = append(out, fmt.Sprintf("file %d", id))
			continue
		}
		out = append(out, f.Path)
	}
	return out
}
