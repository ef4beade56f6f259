package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
)

// The catalog is the policy side's record of what the executor observed: what
// a scan saw (library_files, scan_sessions), what a hash produced, and what a
// delete decided (delete_decisions). The executor reaches it only through the
// small executor.Catalog interface, which *Store implements; it never writes
// these tables with SQL of its own. Job and lease columns are not written
// here. CatalogWrites lists, per table and write path, the only columns the
// catalog's UPDATEs change; tests install guard triggers from it.

// Catalog write paths.
const (
	PathScanStart      = "scan_start"      // scan_sessions INSERT (no UPDATE; see PathScanRecover)
	PathScanFinish     = "scan_finish"     // scan_sessions UPDATE
	PathScanRecover    = "scan_recover"    // scan_sessions UPDATE: a running session whose scan is gone
	PathScanUpsert     = "scan_upsert"     // library_files INSERT … ON CONFLICT DO UPDATE
	PathMarkMissing    = "mark_missing"    // library_files UPDATE
	PathRecordHash     = "record_hash"     // library_files UPDATE
	PathMarkNeedsHash  = "mark_needs_hash" // library_files UPDATE
	PathRecordDecision = "record_decision" // delete_decisions INSERT, library_files UPDATE
)

// CatalogWrites is, per table and write path, the columns a catalog UPDATE
// may change. delete_decisions is append-only: no path may update it.
var CatalogWrites = map[string]map[string][]string{
	"scan_sessions": {
		PathScanFinish:  {"status", "files_seen", "files_new", "files_changed", "files_missing", "files_refused", "paths_unreadable", "error_message", "finished_at"},
		PathScanRecover: {"status", "error_message", "finished_at"},
	},
	"library_files": {
		PathScanUpsert:     {"root", "size_bytes", "mtime_ns", "ctime_ns", "dev", "inode", "is_missing", "needs_hash", "content_hash", "hash_algorithm", "last_seen_scan_id", "updated_at"},
		PathMarkMissing:    {"is_missing", "updated_at"},
		PathRecordHash:     {"hash_algorithm", "content_hash", "needs_hash", "hashed_at", "updated_at"},
		PathMarkNeedsHash:  {"needs_hash", "updated_at"},
		PathRecordDecision: {"is_missing", "updated_at"},
	},
	"delete_decisions": {},
}

// FileStat is what a scan learned about one file.
type FileStat struct {
	Root    string
	Path    string // real path, under Root
	Size    int64
	MtimeNS int64
	// Ident is the file's ctime and (device, inode), nil when the platform
	// gave none; any difference from the recorded one is a change.
	Ident *FileIdent
}

// FileIdent is the part of a file's stat that a rewrite cannot restore: a
// tag editor that keeps the size and puts the mtime back still moves the
// ctime, and a file replaced by another has another inode. Inode numbers
// above 2^63 are stored as their two's-complement int64; they are only
// compared.
type FileIdent struct {
	CtimeNS, Dev, Inode int64
}

func (f FileStat) identArgs() (ctime, dev, inode any) {
	if f.Ident == nil {
		return nil, nil, nil
	}
	return f.Ident.CtimeNS, f.Ident.Dev, f.Ident.Inode
}

// changedSQL is true when the upserted stat differs from the row's: size or
// mtime, or a recorded ctime, device or inode (NULL on either side is "not
// recorded", never a change, so an upgraded catalog is not re-hashed whole).
// trashedSinceSQL is true, in an upsert of library_files, when a delete
// trashed or removed the row's file at or after ?10 (a session's start).
const trashedSinceSQL = `EXISTS (SELECT 1 FROM delete_decisions d WHERE d.file_id = library_files.id
    AND d.decision IN ('trashed', 'removed') AND d.decided_at >= ?10)`

const changedSQL = `(size_bytes <> excluded.size_bytes OR mtime_ns <> excluded.mtime_ns
    OR ctime_ns <> excluded.ctime_ns OR dev <> excluded.dev OR inode <> excluded.inode)`

// ScanCounts are the totals a scan session records. Unreadable counts the
// directories the scan could not list and the files it could not stat
// below a walked root; the catalogued files there keep their state.
type ScanCounts struct {
	Seen, New, Changed, Missing, Refused, Unreadable int64
}

// ErrScanSessionClosed is returned by the writes of a scan whose session is
// no longer running: it was closed as interrupted because its job stopped
// running or ran again. Such a scan (a worker that lost its lease but has
// not noticed yet) must not record files or mark any missing: a newer scan
// owns the catalog.
var ErrScanSessionClosed = errors.New("scan session is no longer running")

// A session closed because its scan is gone ends failed: §3.2 allows no
// other end state, and the scan did not complete.
var statusInterrupted = MustMove(ScanSessionMachine, StatusRunning, StatusFailed)

// jobNotRunningSQL holds for a session whose job is not running: the process
// that ran the scan was killed, or its lease expired and was recovered, so
// nothing will ever finish the session.
const jobNotRunningSQL = `NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = scan_sessions.job_id AND jobs.status = 'running')`

// StartScanSession records a running scan session for job. In the same
// transaction it closes as interrupted every other running session of that
// job (an earlier run of it that ended without finishing, e.g. killed) and
// of a job that is not running: under the single active scan rule no other
// scan can be running, so no session but the new one reports one.
func (s *Store) StartScanSession(ctx context.Context, jobID int64, roots []string) (int64, error) {
	b, _ := json.Marshal(roots)
	var id int64
	err := s.TxOnPath(ctx, []WritePath{{"scan_sessions", PathScanRecover}}, func(tx *sql.Tx) error {
		now := s.NowMS()
		if err := tx.QueryRowContext(ctx, `INSERT INTO scan_sessions(job_id, roots, status, started_at)
VALUES (?, ?, ?, ?) RETURNING id`, jobID, string(b), StatusRunning, now).Scan(&id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE scan_sessions SET status = ?1, finished_at = ?2,
  error_message = 'interrupted: job ' || COALESCE(job_id, '?') || CASE WHEN job_id = ?3
    THEN ' ran again as scan session ' || ?4 ELSE ' is no longer running' END
WHERE status = 'running' AND id <> ?4 AND (job_id = ?3 OR `+jobNotRunningSQL+`)`,
			statusInterrupted, now, jobID, id)
		if err != nil {
			return fmt.Errorf("close earlier scan sessions: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("start scan session of job %d: %w", jobID, err)
	}
	return id, nil
}

// CloseStaleScanSessions closes as interrupted (failed, finished now) every
// running session whose job is not running, so a scan killed mid-walk is not
// shown running for ever. A job whose lease is still live keeps its session
// open: it may yet finish it, and lease recovery decides when it is gone.
func (s *Store) CloseStaleScanSessions(ctx context.Context) (int64, error) {
	var n int64
	err := s.OnPath(ctx, WritePath{"scan_sessions", PathScanRecover}, func(q Querier) error {
		res, err := q.ExecContext(ctx, `UPDATE scan_sessions SET status = ?1, finished_at = ?2,
  error_message = 'interrupted: job ' || COALESCE(job_id, '?') || ' is no longer running'
WHERE status = 'running' AND `+jobNotRunningSQL, statusInterrupted, s.NowMS())
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("close stale scan sessions: %w", err)
	}
	return n, nil
}

// requireRunningSession fails with ErrScanSessionClosed unless session id
// is running; scan writes check it in their own transaction.
func requireRunningSession(ctx context.Context, q Querier, id int64) error {
	_, err := runningSessionStart(ctx, q, id)
	return err
}

// runningSessionStart is the started_at of session id, which must be
// running (ErrScanSessionClosed otherwise).
func runningSessionStart(ctx context.Context, q Querier, id int64) (int64, error) {
	var status string
	var started int64
	err := q.QueryRowContext(ctx, `SELECT status, started_at FROM scan_sessions WHERE id = ?`, id).Scan(&status, &started)
	switch {
	case errors.Is(err, sql.ErrNoRows), err == nil && status != StatusRunning:
		return 0, fmt.Errorf("scan session %d: %w", id, ErrScanSessionClosed)
	case err != nil:
		return 0, fmt.Errorf("scan session %d: %w", id, err)
	}
	return started, nil
}

// FinishScanSession moves a running session to succeeded or failed. The
// message is capped here (daemon.CapMessage) rather than by each caller: a
// failure's text can carry a database error or a path of any length, and
// every session is closed through this one write.
func (s *Store) FinishScanSession(ctx context.Context, id int64, status string, c ScanCounts, errMsg string) error {
	if err := ScanSessionMachine.Check(StatusRunning, status); err != nil {
		return err
	}
	var msg any
	if errMsg != "" {
		msg = daemon.CapMessage(errMsg)
	}
	var n int64
	err := s.OnPath(ctx, WritePath{"scan_sessions", PathScanFinish}, func(q Querier) error {
		res, err := q.ExecContext(ctx, `UPDATE scan_sessions SET status = ?, files_seen = ?, files_new = ?,
files_changed = ?, files_missing = ?, files_refused = ?, paths_unreadable = ?, error_message = ?, finished_at = ?
WHERE id = ? AND status = 'running'`, status, c.Seen, c.New, c.Changed, c.Missing, c.Refused, c.Unreadable, msg, s.NowMS(), id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("scan session %d is not running: %w", id, ErrNotFound)
	}
	return nil
}

// UpsertFiles records one batch of scanned files in one transaction. A file
// whose size, mtime, ctime, device or inode changed (or that was never
// hashed) gets needs_hash=1 and loses its stale hash; every file seen is no
// longer missing, unless a delete marked it missing since the session
// started (it trashed the file after the scan saw it). A session that is no longer running records nothing
// (ErrScanSessionClosed).
func (s *Store) UpsertFiles(ctx context.Context, sessionID int64, batch []FileStat) (newN, changedN int64, err error) {
	now := s.NowMS()
	err = s.TxOnPath(ctx, []WritePath{{"library_files", PathScanUpsert}}, func(tx *sql.Tx) error {
		started, err := runningSessionStart(ctx, tx, sessionID)
		if err != nil {
			return err
		}
		// A row a delete trashed or removed since the session started
		// stays missing: the scan saw the file before the delete moved it.
		// (Asked of the decisions, not of updated_at, which other writes
		// move too; only rows marked missing ask.)
		// In a comparison a NULL ctime/dev/inode (a row from before 0012,
		// or a stat without them) yields NULL, which CASE treats as false.
		st, err := tx.PrepareContext(ctx, `INSERT INTO library_files(root, path, size_bytes, mtime_ns, ctime_ns, dev, inode,
  is_missing, needs_hash, last_seen_scan_id, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?7, ?8, ?9, 0, 1, ?5, ?6, ?6)
ON CONFLICT(path) DO UPDATE SET
  needs_hash = CASE WHEN `+changedSQL+` OR content_hash IS NULL THEN 1 ELSE needs_hash END,
  content_hash = CASE WHEN `+changedSQL+` THEN NULL ELSE content_hash END,
  hash_algorithm = CASE WHEN `+changedSQL+` THEN NULL ELSE hash_algorithm END,
  updated_at = CASE WHEN `+changedSQL+` OR (is_missing <> 0 AND NOT `+trashedSinceSQL+`) THEN excluded.updated_at ELSE updated_at END,
  root = excluded.root, size_bytes = excluded.size_bytes, mtime_ns = excluded.mtime_ns,
  ctime_ns = COALESCE(excluded.ctime_ns, ctime_ns), dev = COALESCE(excluded.dev, dev), inode = COALESCE(excluded.inode, inode),
  is_missing = CASE WHEN is_missing <> 0 AND `+trashedSinceSQL+` THEN 1 ELSE 0 END, last_seen_scan_id = excluded.last_seen_scan_id
RETURNING created_at, updated_at, needs_hash`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, f := range batch {
			var created, updated int64
			var needs bool
			ctime, dev, inode := f.identArgs()
			if err := st.QueryRowContext(ctx, f.Root, f.Path, f.Size, f.MtimeNS, sessionID, now, ctime, dev, inode, started).Scan(&created, &updated, &needs); err != nil {
				return fmt.Errorf("upsert %s: %w", f.Path, err)
			}
			switch {
			case created == now:
				newN++
			case updated == now && needs:
				changedN++
			}
		}
		return nil
	})
	return newN, changedN, err
}

// WalkedRoot is a root a scan walked to the end, with what it could not
// read below it.
type WalkedRoot struct {
	Root string
	// Unread are the directories below Root the scan could not list and the
	// files it could not stat (permission denied, an I/O error). The
	// catalogued files at or under them were not seen, which says nothing
	// about whether they still exist: they keep their state.
	Unread []string
	// Empty are the directories at or below Root under which the walk saw
	// no file, each with the device it sits on. A catalogued file whose
	// nearest walked directory is one of them, on another device than the
	// one the file was catalogued on, was on a filesystem that is not
	// mounted there now (a second disk mounted below the root): it keeps
	// its state. A directory holding any file is taken as mounted, so a
	// disk that comes back with another device number does not keep its
	// deleted files live for ever.
	Empty map[string]int64
}

// Missing is what MarkMissing did.
type Missing struct {
	Marked int64 // files marked missing
	// Unmounted counts, per directory of WalkedRoot.Empty, the files kept
	// because that directory now sits on another device than they were
	// catalogued on.
	Unmounted map[string]int64
}

// MarkMissing flags every file of the walked roots that session did not
// see, except those at or under a path the scan could not read and those
// whose filesystem is not mounted where it was (WalkedRoot.Empty). Roots that
// could not be walked are not passed, so an unmounted disk never makes its
// files look deleted. Files of a root that is no longer configured (not
// among the roots the session was started with) are flagged too, walked or
// not: nothing would ever scan them again, and left live they would stay in
// duplicate groups that every path check then refuses to act on. A session
// that is no longer running marks nothing (ErrScanSessionClosed): a newer
// scan has started and owns the catalog.
func (s *Store) MarkMissing(ctx context.Context, sessionID int64, walked []WalkedRoot) (Missing, error) {
	now := s.NowMS()
	var n int64
	var unmounted map[string]int64
	err := s.TxOnPath(ctx, []WritePath{{"library_files", PathMarkMissing}}, func(tx *sql.Tx) error {
		if err := requireRunningSession(ctx, tx, sessionID); err != nil {
			return err
		}
		k, err := markMissingOutsideRoots(ctx, tx, sessionID, now)
		if err != nil {
			return err
		}
		n += k
		var whole []any
		for _, w := range walked {
			if len(w.Unread) == 0 && len(w.Empty) == 0 {
				whole = append(whole, w.Root)
				continue
			}
			k, kept, err := markMissingExcept(ctx, tx, sessionID, now, w)
			if err != nil {
				return err
			}
			n += k
			for dir, c := range kept {
				if unmounted == nil {
					unmounted = make(map[string]int64)
				}
				unmounted[dir] += c
			}
		}
		if len(whole) == 0 {
			return nil
		}
		res, err := tx.ExecContext(ctx, `UPDATE library_files SET is_missing = 1, updated_at = ?
WHERE is_missing = 0 AND (last_seen_scan_id IS NULL OR last_seen_scan_id <> ?)
  AND root IN (?`+strings.Repeat(",?", len(whole)-1)+`)`, append([]any{now, sessionID}, whole...)...)
		if err != nil {
			return err
		}
		k, err = res.RowsAffected()
		n += k
		return err
	})
	if err != nil {
		return Missing{}, err
	}
	return Missing{Marked: n, Unmounted: unmounted}, nil
}

// markMissingOutsideRoots marks missing the live files whose root is not one
// of the roots session was started with. A session recorded without roots
// marks nothing: an empty root list is more likely a mistake in the
// settings than a wish to empty the catalog.
func markMissingOutsideRoots(ctx context.Context, tx *sql.Tx, sessionID, now int64) (int64, error) {
	res, err := tx.ExecContext(ctx, `WITH configured(root) AS (
  SELECT value FROM json_each((SELECT roots FROM scan_sessions WHERE id = ?2)))
UPDATE library_files SET is_missing = 1, updated_at = ?1
WHERE is_missing = 0 AND EXISTS (SELECT 1 FROM configured) AND root NOT IN (SELECT root FROM configured)`, now, sessionID)
	if err != nil {
		return 0, fmt.Errorf("mark missing the files of roots no longer configured: %w", err)
	}
	return res.RowsAffected()
}

// markMissingExcept marks missing the files of w.Root that session did not
// see, that lie neither at nor under one of w.Unread, and whose filesystem
// is not off its mount point (offDevice); it returns how many it marked and,
// per directory of w.Empty, how many it kept for that last reason. The
// files not seen are few (deleted ones, and those under the unread paths),
// so they are read and filtered here rather than matched against every
// unread prefix in SQL.
func markMissingExcept(ctx context.Context, tx *sql.Tx, sessionID, now int64, w WalkedRoot) (int64, map[string]int64, error) {
	unread := make(map[string]bool, len(w.Unread))
	for _, p := range w.Unread {
		unread[filepath.Clean(p)] = true
	}
	rows, err := tx.QueryContext(ctx, `SELECT f.id, f.path, f.dev, (SELECT started_at FROM scan_sessions WHERE id = f.last_seen_scan_id)
FROM library_files f WHERE f.root = ? AND f.is_missing = 0 AND (f.last_seen_scan_id IS NULL OR f.last_seen_scan_id <> ?)`, w.Root, sessionID)
	if err != nil {
		return 0, nil, err
	}
	var gone []int64
	var kept map[string]int64
	for rows.Next() {
		var id int64
		var path string
		var dev, seenAt sql.NullInt64
		if err := rows.Scan(&id, &path, &dev, &seenAt); err != nil {
			rows.Close()
			return 0, nil, err
		}
		if atOrUnder(unread, path) {
			continue
		}
		// Kept only for UnmountedGrace after the scan that last saw it: a
		// directory emptied on a disk whose device number changed since
		// (NFS, FUSE, btrfs subvolumes renumber on every mount) looks the
		// same as an unmounted disk, and its deleted files must not stay
		// live for ever.
		if dir, off := offDevice(w.Empty, path, dev); off && seenAt.Valid && now-seenAt.Int64 <= UnmountedGrace.Milliseconds() {
			if kept == nil {
				kept = make(map[string]int64)
			}
			kept[dir]++
			continue
		}
		gone = append(gone, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if len(gone) == 0 {
		return 0, kept, nil
	}
	st, err := tx.PrepareContext(ctx, `UPDATE library_files SET is_missing = 1, updated_at = ? WHERE id = ? AND is_missing = 0`)
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	var n int64
	for _, id := range gone {
		res, err := st.ExecContext(ctx, now, id)
		if err != nil {
			return n, nil, err
		}
		k, _ := res.RowsAffected()
		n += k
	}
	return n, kept, nil
}

// UnmountedGrace is how long after the scan that last saw it a file on a
// disk not mounted below its root is kept (WalkedRoot.Empty); after that it
// is marked missing like any file not seen.
const UnmountedGrace = 7 * 24 * time.Hour

// offDevice reports whether the file at path, catalogued on device dev, is
// on a filesystem not mounted where it was: the nearest directory above it
// that the walk entered is one it found no file under (empty) and sits on
// another device. It returns that directory. A file with no recorded device
// gives no evidence and is not off. Emptiness is passed down a tree (a
// directory under which no file was seen has none under its subdirectories
// either), so the first empty directory met going up is the nearest walked
// one whenever the nearest walked one is empty.
func offDevice(empty map[string]int64, path string, dev sql.NullInt64) (string, bool) {
	if !dev.Valid || len(empty) == 0 {
		return "", false
	}
	for p := filepath.Dir(filepath.Clean(path)); ; {
		if d, ok := empty[p]; ok {
			return p, d != dev.Int64
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", false
		}
		p = parent
	}
}

// atOrUnder reports whether path is one of paths or lies below one of them.
func atOrUnder(paths map[string]bool, path string) bool {
	for p := filepath.Clean(path); ; {
		if paths[p] {
			return true
		}
		parent := filepath.Dir(p)
		if parent == p {
			return false
		}
		p = parent
	}
}

// LiveFiles counts the files of root the catalog holds as present.
func (s *Store) LiveFiles(ctx context.Context, root string) (int64, error) {
	var n int64
	err := s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM library_files WHERE root = ? AND is_missing = 0`, root).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count live files of %s: %w", root, err)
	}
	return n, nil
}

// FilesToHash returns up to limit live files needing a hash with id > after.
func (s *Store) FilesToHash(ctx context.Context, after int64, limit int) ([]File, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT `+FileColumns+` FROM library_files
WHERE needs_hash = 1 AND is_missing = 0 AND id > ? ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []File
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// PendingHashWork counts files needing a hash and their bytes.
func (s *Store) PendingHashWork(ctx context.Context) (files, bytes int64, err error) {
	err = s.DB.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM library_files
WHERE needs_hash = 1 AND is_missing = 0`).Scan(&files, &bytes)
	return files, bytes, err
}

// RecordHash stores a digest for f, only if the row still describes the
// stat that was hashed (a scan in between may have seen a rewrite); false
// means the file changed meanwhile and stays needs_hash=1 for the next pass.
func (s *Store) RecordHash(ctx context.Context, f File, algo, hashHex string) (bool, error) {
	now := s.NowMS()
	var n int64
	err := s.OnPath(ctx, WritePath{"library_files", PathRecordHash}, func(q Querier) error {
		res, err := q.ExecContext(ctx, `UPDATE library_files SET hash_algorithm = ?, content_hash = ?,
needs_hash = 0, hashed_at = ?, updated_at = ?
WHERE id = ? AND size_bytes = ? AND mtime_ns = ? AND ctime_ns IS ? AND dev IS ? AND inode IS ? AND is_missing = 0`,
			algo, hashHex, now, now, f.ID, f.SizeBytes, f.MtimeNS, f.CtimeNS, f.Dev, f.Inode)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1, err
}

// MarkNeedsHash puts f back in the hash queue (its content changed).
func (s *Store) MarkNeedsHash(ctx context.Context, id int64) error {
	return s.OnPath(ctx, WritePath{"library_files", PathMarkNeedsHash}, func(q Querier) error {
		_, err := q.ExecContext(ctx, `UPDATE library_files SET needs_hash = 1, updated_at = ? WHERE id = ?`, s.NowMS(), id)
		return err
	})
}

// otherAlgorithms lists the legal hash algorithms other than algo, so the
// queries below can seek ix_library_files_dedup_group by equality instead of
// scanning it for "<> algo".
func otherAlgorithms(algo string) []any {
	var out []any
	for _, v := range hashAlgorithms() {
		if v != algo {
			out = append(out, v)
		}
	}
	return out
}

// hashAlgorithms lists the legal hash algorithms.
func hashAlgorithms() []string {
	for _, l := range LegalValues {
		if l.Table == "library_files" && l.Column == "hash_algorithm" {
			return l.Values
		}
	}
	return nil
}

// HashPayload is a hash job's payload: the algorithm the pass hashes with.
type HashPayload struct {
	Algorithm string `json:"algorithm"`
}

const hashedWithSQL = `is_missing = 0 AND needs_hash = 0 AND hash_algorithm IS NOT NULL AND content_hash IS NOT NULL`

// MarkOtherAlgorithm puts every hashed file whose digest was made with an
// algorithm other than algo back in the hash queue, so the next hash pass
// replaces its digest (and group key) with one of algo. Marked files leave
// their duplicate groups at once (§6.2 takes needs_hash = 0 only): a group
// never mixes digests of two algorithms, and a delete authorised against the
// old group is refused by the executor's membership check until the file is
// hashed again.
func (s *Store) MarkOtherAlgorithm(ctx context.Context, algo string) (int64, error) {
	others := otherAlgorithms(algo)
	if len(others) == 0 {
		return 0, nil
	}
	args := append([]any{s.NowMS()}, others...)
	var n int64
	err := s.OnPath(ctx, WritePath{"library_files", PathMarkNeedsHash}, func(q Querier) error {
		res, err := q.ExecContext(ctx, `UPDATE library_files SET needs_hash = 1, updated_at = ?
WHERE `+hashedWithSQL+` AND hash_algorithm IN (?`+strings.Repeat(",?", len(others)-1)+`)`, args...)
		if err != nil {
			return fmt.Errorf("mark files hashed with another algorithm than %s: %w", algo, err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// HashedWithOtherAlgorithm reports whether some live, hashed file carries a
// digest made with an algorithm other than algo.
func (s *Store) HashedWithOtherAlgorithm(ctx context.Context, algo string) (bool, error) {
	others := otherAlgorithms(algo)
	if len(others) == 0 {
		return false, nil
	}
	var found bool
	err := s.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM library_files
WHERE `+hashedWithSQL+` AND hash_algorithm IN (?`+strings.Repeat(",?", len(others)-1)+`))`, others...).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look for files hashed with another algorithm than %s: %w", algo, err)
	}
	return found, nil
}

// CatalogAlgorithm is the algorithm the catalog already uses, or "" for
// one that never hashed anything: that of most current digests (live,
// hashed files; a tie goes to the name that sorts first); failing those,
// that of most digests recorded at all (files missing since, or awaiting a
// new hash, which keep theirs); failing those, that of the newest hash
// job (one queued before a restart). So a root taken away for a while, or
// a restart before the first digest, never makes the catalog look new.
//
// A catalog of one algorithm, the usual case, is answered by one probe of
// the group index per algorithm; a mixed one is counted (a quarter of a
// second for a million files), and so are the recorded digests of a
// catalog with no current digest.
func (s *Store) CatalogAlgorithm(ctx context.Context) (string, error) {
	var held []string
	for _, algo := range hashAlgorithms() {
		var found bool
		if err := s.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM library_files
WHERE `+hashedWithSQL+` AND hash_algorithm = ?)`, algo).Scan(&found); err != nil {
			return "", fmt.Errorf("read the algorithm of the catalog's digests: %w", err)
		}
		if found {
			held = append(held, algo)
		}
	}
	if len(held) == 1 {
		return held[0], nil
	}
	where := hashedWithSQL
	if len(held) == 0 {
		where = `hash_algorithm IS NOT NULL AND content_hash IS NOT NULL`
	}
	var algo string
	err := s.DB.QueryRowContext(ctx, `SELECT hash_algorithm FROM library_files WHERE `+where+`
GROUP BY hash_algorithm ORDER BY COUNT(*) DESC, hash_algorithm LIMIT 1`).Scan(&algo)
	if err == nil {
		return algo, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("read the algorithm of the catalog's digests: %w", err)
	}
	var payload string
	err = s.DB.QueryRowContext(ctx, `SELECT payload FROM jobs WHERE kind = ? ORDER BY id DESC LIMIT 1`, KindHash).Scan(&payload)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the algorithm of the newest hash job: %w", err)
	}
	var p HashPayload
	// A payload that names no algorithm this version knows is no choice
	// to keep; the caller then chooses as for a new catalog.
	if json.Unmarshal([]byte(payload), &p) != nil || !slices.Contains(hashAlgorithms(), p.Algorithm) {
		return "", nil
	}
	return p.Algorithm, nil
}

// Decision is one recorded delete decision.
type Decision struct {
	JobID     int64   `json:"job_id"`
	GroupKey  string  `json:"group_key"`
	FileID    int64   `json:"file_id"`
	Path      string  `json:"path"`
	Decision  string  `json:"decision"` // keep, trashed, removed, refused
	Reason    string  `json:"reason"`
	TrashPath *string `json:"trash_path"`
	DecidedAt int64   `json:"decided_at"`
}

// RecordDecision appends d; when d removed or trashed the file, the file
// is marked missing in the same transaction.
func (s *Store) RecordDecision(ctx context.Context, d Decision) error {
	now := s.NowMS()
	paths := []WritePath{{"delete_decisions", PathRecordDecision}, {"library_files", PathRecordDecision}}
	return s.TxOnPath(ctx, paths, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO delete_decisions(job_id, group_key, file_id, path, decision, reason, trash_path, decided_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, d.JobID, d.GroupKey, d.FileID, d.Path, d.Decision, d.Reason, d.TrashPath, now); err != nil {
			return err
		}
		if d.Decision == "trashed" || d.Decision == "removed" {
			if _, err := tx.ExecContext(ctx, `UPDATE library_files SET is_missing = 1, updated_at = ? WHERE id = ?`, now, d.FileID); err != nil {
				return err
			}
		}
		return nil
	})
}

// Decisions lists the decisions of a delete job in order.
func (s *Store) Decisions(ctx context.Context, jobID int64) ([]Decision, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT job_id, group_key, file_id, path, decision, reason, trash_path, decided_at
FROM delete_decisions WHERE job_id = ? ORDER BY id`, jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Decision
	for rows.Next() {
		var d Decision
		if err := rows.Scan(&d.JobID, &d.GroupKey, &d.FileID, &d.Path, &d.Decision, &d.Reason, &d.TrashPath, &d.DecidedAt); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
