package executor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vesta-cx/euterpe/daemon"
	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// CodeCleanupFailed is persisted on a failed cleanup row.
const CodeCleanupFailed = "cleanup_failed"

var (
	sqlCleanupRequeueStale = mustUpdate("thumbnail_cleanup_jobs", "requeue_stale", []Set{
		{"status", "'" + store.MustMove(store.CleanupMachine, store.StatusRunning, store.StatusPending) + "'"},
		{"worker_id", "NULL"}, {"worker_heartbeat_at", "NULL"}, {"lease_expires_at", "NULL"}, {"updated_at", "?1"},
	}, "status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?1)")

	// A due row is claimed only when its group has no pending or running
	// thumbnail left (§4.4), counting the ungrouped rows of its files (see
	// inGroupSQL): one rendered after the cleanup would never be removed.
	// Nor while a delete in its group is unfinished (a delete is retried
	// until it ends): one queued behind a long scan or hash would run
	// after the cleanup, and its copies' thumbnails would stay. A payload
	// that is not JSON (failed bad_payload by its run) holds nothing up.
	sqlCleanupClaim = mustUpdate("thumbnail_cleanup_jobs", "claim", []Set{
		{"status", "'" + store.MustMove(store.CleanupMachine, store.StatusPending, store.StatusRunning) + "'"},
		{"worker_id", "?1"}, {"worker_heartbeat_at", "?2"}, {"lease_expires_at", "?3"},
		{"finished_at", "NULL"}, {"updated_at", "?2"},
	}, `id = (SELECT c.id FROM thumbnail_cleanup_jobs c
  WHERE c.status = 'pending' AND c.execute_after <= ?2
    AND NOT EXISTS (SELECT 1 FROM thumbnails t WHERE t.status IN ('pending','running') AND `+inGroupSQL("t", "c.group_key")+`)
    AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.status IN ('pending','running','retryable') AND j.kind = 'delete'
      AND CASE WHEN json_valid(j.payload) THEN json_extract(j.payload, '$.group_key') END = c.group_key)
  ORDER BY c.execute_after, c.id LIMIT 1) AND status = 'pending'
RETURNING id, group_key`)

	sqlCleanupHeartbeat = mustUpdate("thumbnail_cleanup_jobs", "heartbeat", []Set{
		{"worker_heartbeat_at", "?1"}, {"lease_expires_at", "?2"}, {"updated_at", "?1"},
	}, "id = ?3 AND worker_id = ?4 AND status = 'running' AND lease_expires_at > ?1")

	sqlCleanupFinish = mustUpdate("thumbnail_cleanup_jobs", "finish", []Set{
		{"status", "?1"}, {"error_code", "?2"}, {"error_message", "?3"},
		{"finished_at", "?4"}, {"worker_heartbeat_at", "?4"}, {"lease_expires_at", "NULL"}, {"updated_at", "?4"},
	}, "id = ?5 AND worker_id = ?6 AND status = 'running' AND lease_expires_at > ?4")
)

// RequeueStaleCleanups is the §4.4 claim-path requeue: running cleanup
// rows whose lease has expired go back to pending, lease owner fields
// cleared.
func (x *Executor) RequeueStaleCleanups(ctx context.Context) (int64, error) {
	res, err := x.exec(ctx, sqlCleanupRequeueStale, x.now())
	if err != nil {
		return 0, fmt.Errorf("requeue stale cleanups: %w", err)
	}
	return res.RowsAffected()
}

// RunCleanupOnce claims one due cleanup row and deletes the group's
// terminal (ready or failed) thumbnail rows and their cache files. Only
// files inside the thumbnails directory are ever removed. With no cleanup
// due, it runs a round of the sweep of unreachable thumbnails when one is
// due (SweepThumbnailsOnce), and reports nothing claimed.
func (x *Executor) RunCleanupOnce(ctx context.Context) (bool, error) {
	x.init()
	if _, err := x.RequeueStaleCleanups(ctx); err != nil {
		return false, err
	}
	now, deadline := x.claimStamp()
	tok := x.token()
	var id int64
	var group string
	err := x.queryRow(ctx, sqlCleanupClaim, func(r *sql.Row) error { return r.Scan(&id, &group) }, tok, now, x.leaseUntil(now))
	if errors.Is(err, sql.ErrNoRows) {
		// Nothing scheduled: time for the thumbnails no group cleanup
		// will ever reach, and to say which cleanups a failing delete
		// holds back.
		return false, errors.Join(x.warnHeldCleanups(ctx), x.sweepIfDue(ctx))
	}
	if err != nil {
		return false, fmt.Errorf("claim cleanup: %w", err)
	}
	renew := func(ctx context.Context) error {
		now := x.now()
		res, err := x.exec(ctx, sqlCleanupHeartbeat, now, x.leaseUntil(now), id, tok)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return stale("thumbnail_cleanup_jobs", id)
		}
		return nil
	}
	err = lease.Keep(ctx, x.LeaseTTL, renew, func(ctx context.Context) error { return x.cleanGroup(ctx, group) },
		lease.Until(deadline))
	if errors.Is(err, lease.ErrStale) {
		return true, nil
	}
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	status, code, msg := store.StatusCompleted, any(nil), any(nil)
	if err != nil {
		status, code, msg = store.StatusFailed, CodeCleanupFailed, daemon.CapMessage(err.Error())
	}
	if err := store.CleanupMachine.Check(store.StatusRunning, status); err != nil {
		return true, err
	}
	res, err := x.exec(context.WithoutCancel(ctx), sqlCleanupFinish, status, code, msg, x.now(), id, tok)
	if err != nil {
		return true, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return true, stale("thumbnail_cleanup_jobs", id)
	}
	return true, nil
}

// inGroupSQL matches the thumbnails rows (alias t) of group (an SQL
// expression): those admitted for it, and those admitted before their file
// was hashed, which have no group_key and keep none once the file has a
// digest (policy.AdmitThumbnail), but belong to the group of that digest.
// The file's digest is kept when a delete marks it missing, so the rows of
// a deleted copy are found too. The ungrouped rows are few (what was
// requested between a scan and its hash pass) and reach their file by its
// key; the group's own rows use ix_thumbnails_group.
func inGroupSQL(t, group string) string {
	return `(` + t + `.group_key = ` + group + ` OR (` + t + `.group_key IS NULL AND EXISTS (SELECT 1 FROM library_files f
  WHERE f.id = ` + t + `.file_id AND f.hash_algorithm || ':' || f.content_hash = ` + group + `)))`
}

func (x *Executor) cleanGroup(ctx context.Context, group string) error {
	todo, err := x.thumbRows(ctx, `SELECT id, output_path FROM thumbnails t
WHERE t.status IN ('ready','failed') AND `+inGroupSQL("t", "?1"), group)
	if err != nil {
		return err
	}
	// A cleared cache (its directory removed) has nothing to remove, but
	// Contains cannot judge a path in a directory that is not there.
	if len(todo) > 0 {
		if err := x.Thumbs.Ensure(); err != nil {
			return fmt.Errorf("thumbnails directory: %w", err)
		}
	}
	for _, r := range todo {
		if r.path != "" {
			if err := x.Thumbs.Contains(r.path); err != nil {
				return fmt.Errorf("thumbnail %d: refusing to remove %q: %w", r.id, r.path, err)
			}
		}
		if x.beforeCleanRow != nil {
			x.beforeCleanRow(r.id, r.path)
		}
		if _, err := x.removeThumb(ctx, r.id, r.path, "1"); err != nil {
			return fmt.Errorf("thumbnail %d: %w", r.id, err)
		}
	}
	return nil
}

// thumbRow is a thumbnail row about to be removed, with its cache path.
type thumbRow struct {
	id   int64
	path string
}

// thumbRows reads the (id, output_path) rows query selects.
func (x *Executor) thumbRows(ctx context.Context, query string, args ...any) ([]thumbRow, error) {
	rows, err := x.Store.DB.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []thumbRow
	for rows.Next() {
		var r thumbRow
		if err := rows.Scan(&r.id, &r.path); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// removeThumb deletes thumbnail row id, if it is still ready or failed and
// still matches cond (SQL on the row, its parameters ?2… bound to args),
// and then its cache file path, which Thumbs.Contains has judged, and
// reports whether it deleted the row. The row goes first and its file
// while the transaction holds the write lock: a row replaced since it was
// read (a new one admitted for the same cache path, perhaps rendered
// already) owns the file now, and no new row can be admitted for the path
// until the file is gone. A file that cannot be removed keeps its row.
func (x *Executor) removeThumb(ctx context.Context, id int64, path, cond string, args ...any) (bool, error) {
	deleted := false
	err := x.Store.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM thumbnails WHERE id = ?1 AND status IN ('ready','failed') AND (`+cond+`)`,
			append([]any{id}, args...)...)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil
		}
		deleted = true
		if path == "" {
			return nil
		}
		return x.unlinkCacheFile(path)
	})
	if err != nil {
		deleted = false
	}
	return deleted, err
}

// unlinkCacheFile removes the cache file at path, which Thumbs.Contains
// judged to lie inside the thumbnails directory, without following a
// symlink anywhere on the way: the directory holding it is opened from the
// thumbnails directory's real path with every symlink refused, and the
// name is unlinked relative to that descriptor. A directory swapped for a
// symlink since the check fails the removal instead of leading it where the
// link points; a symlink in place of the file is unlinked itself, its
// target untouched; a directory in its place stays. A file already gone is
// no error.
func (x *Executor) unlinkCacheFile(path string) error {
	// Contains judged the cleaned path; the kernel would walk a ".." after
	// a symlink in the raw one elsewhere.
	p := filepath.Clean(path)
	parent, err := filepath.EvalSymlinks(filepath.Dir(p))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(x.Thumbs.Path(), parent)
	if err != nil || !filepath.IsLocal(rel) {
		return fmt.Errorf("%w: %q is no longer inside %s", pathsafe.ErrOutside, path, x.Thumbs.Path())
	}
	dir, _, err := openDirNoSymlinks(filepath.Join(x.Thumbs.Path(), rel))
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := unix.Unlinkat(int(dir.Fd()), filepath.Base(p), 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}
