package executor

import (
	"context"
	"fmt"
	"time"
)

// DefaultThumbSweepEvery is how often, by default, the cleanup loop looks
// for thumbnails nothing can request any more.
const DefaultThumbSweepEvery = 10 * time.Minute

// defaultThumbSweepBatch bounds the rows one sweep round reads and
// removes; each is removed in a write transaction of its own, so the round
// never holds SQLite's write lock for more than one row.
const defaultThumbSweepBatch = 500

// unreachableSQL matches the thumbnails rows (alias t) no request can reach:
// those of a file the catalog no longer holds live (marked missing —
// deleted, moved or renamed outside Euterpe, or under a root taken out of
// the configuration — or its row gone), and, when format (an SQL
// expression) is not the empty string, those of another format or size (an
// SQL expression) than the API asks for: it asks only for the configured ones,
// so the rows of an earlier setting would stay for ever. A file that comes
// back is live again, and its thumbnail is admitted anew at its next
// request.
func unreachableSQL(t, format, size string) string {
	return `(NOT EXISTS (SELECT 1 FROM library_files f WHERE f.id = ` + t + `.file_id AND f.is_missing = 0)
  OR (` + format + ` <> '' AND (` + t + `.format <> ` + format + ` OR ` + t + `.max_size <> ` + size + `)))`
}

// ThumbSweep is what one sweep round did.
type ThumbSweep struct {
	Removed int // rows deleted, with their cache files
	Refused int // rows kept: their path is not a file inside the thumbnails directory
	More    bool
}

// SweepThumbnailsOnce removes up to one batch of the ready and failed
// thumbnail rows no request can reach (see unreachableSQL) and their cache
// files, continuing after the rows the previous round read; More reports
// that rows may remain beyond this batch. Rows pending or running are never
// touched: a render in flight finishes, and a later round sees its row. A
// row is removed as a group cleanup removes it (removeThumb), and only
// while it is still unreachable: a row replaced since it was read, or whose
// file came back, stays with its file. A row whose path is not a regular
// file inside the thumbnails directory (a symlink, a path elsewhere) keeps
// its row and its path, and is logged; the round goes on with the next.
func (x *Executor) SweepThumbnailsOnce(ctx context.Context) (ThumbSweep, error) {
	x.init()
	var res ThumbSweep
	if x.Thumbs == nil {
		return res, nil
	}
	format, size := "", 0
	if x.ThumbFormat != "" && x.ThumbSize > 0 {
		format, size = x.ThumbFormat, x.ThumbSize
	}
	batch := x.sweepBatch
	if batch <= 0 {
		batch = defaultThumbSweepBatch
	}
	after := x.sweepCursor.Load()
	todo, err := x.thumbRows(ctx, `SELECT t.id, t.output_path FROM thumbnails t
WHERE t.id > ?1 AND t.status IN ('ready','failed') AND `+unreachableSQL("t", "?2", "?3")+`
ORDER BY t.id LIMIT ?4`, after, format, size, batch)
	if err != nil {
		return res, fmt.Errorf("thumbnail sweep: %w", err)
	}
	res.More = len(todo) == batch
	if res.More {
		x.sweepCursor.Store(todo[len(todo)-1].id)
	} else {
		x.sweepCursor.Store(0)
	}
	if len(todo) == 0 {
		return res, nil
	}
	// A cleared cache (its directory removed) has nothing to remove, but
	// Contains cannot judge a path in a directory that is not there.
	if err := x.Thumbs.Ensure(); err != nil {
		return res, fmt.Errorf("thumbnail sweep: thumbnails directory: %w", err)
	}
	// A row that cannot be removed does not hold back the others; it is
	// tried again next pass.
	var failed int
	var first error
	for _, r := range todo {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if r.path != "" {
			if err := x.Thumbs.Contains(r.path); err != nil {
				res.Refused++
				x.Log.Warn("thumbnail sweep: row kept, its cache path is not a file inside the thumbnails directory",
					"thumbnail_id", r.id, "path", r.path, "err", err)
				continue
			}
		}
		if x.beforeCleanRow != nil {
			x.beforeCleanRow(r.id, r.path)
		}
		deleted, err := x.removeThumb(ctx, r.id, r.path, unreachableSQL("thumbnails", "?2", "?3"), format, size)
		if err != nil {
			if failed++; first == nil {
				first = fmt.Errorf("thumbnail %d: %w", r.id, err)
			}
			continue
		}
		if deleted {
			res.Removed++
		}
	}
	if first != nil {
		return res, fmt.Errorf("thumbnail sweep: %d rows not removed, the first: %w", failed, first)
	}
	return res, nil
}

// sweepIfDue runs a sweep round when one is due: every ThumbSweepEvery,
// the rounds of one pass a poll apart. Only one round runs at a time.
func (x *Executor) sweepIfDue(ctx context.Context) error {
	if !x.sweepMu.TryLock() {
		return nil
	}
	defer x.sweepMu.Unlock()
	now := time.Now()
	if now.Before(x.sweepDue) {
		return nil
	}
	every := x.ThumbSweepEvery
	if every <= 0 {
		every = DefaultThumbSweepEvery
	}
	res, err := x.SweepThumbnailsOnce(ctx)
	x.sweepDue = now.Add(every)
	if res.More && err == nil {
		x.sweepDue = now // the rest of the pass, at the next poll
	}
	if res.Removed > 0 || res.Refused > 0 {
		x.Log.Info("unreachable thumbnails removed", "removed", res.Removed, "refused", res.Refused)
	}
	return err
}
