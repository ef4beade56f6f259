package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
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
	PathScanStart      = "scan_start"      // scan_sessions INSERT
	PathScanFinish     = "scan_finish"     // scan_sessions UPDATE
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
		PathScanFinish: {"status", "files_seen", "files_new", "files_changed", "files_missing", "files_refused", "error_message", "finished_at"},
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
const changedSQL = `(size_bytes <> excluded.size_bytes OR mtime_ns <> excluded.mtime_ns
    OR ctime_ns <> excluded.ctime_ns OR dev <> excluded.dev OR inode <> excluded.inode)`

// ScanCounts are the totals a scan session records.
type ScanCounts struct {
	Seen, New, Changed, Missing, Refused int64
}

// StartScanSession records a running scan session for job.
func (s *Store) StartScanSession(ctx context.Context, jobID int64, roots []string) (int64, error) {
	b, _ := json.Marshal(roots)
	var id int64
	err := s.OnPath(ctx, WritePath{"scan_sessions", PathScanStart}, func(q Querier) error {
		return q.QueryRowContext(ctx, `INSERT INTO scan_sessions(job_id, roots, status, started_at)
VALUES (?, ?, ?, ?) RETURNING id`, jobID, string(b), StatusRunning, s.NowMS()).Scan(&id)
	})
	return id, err
}

// FinishScanSession moves a running session to succeeded or failed.
func (s *Store) FinishScanSession(ctx context.Context, id int64, status string, c ScanCounts, errMsg string) error {
	if err := ScanSessionMachine.Check(StatusRunning, status); err != nil {
		return err
	}
	var msg any
	if errMsg != "" {
		msg = errMsg
	}
	var n int64
	err := s.OnPath(ctx, WritePath{"scan_sessions", PathScanFinish}, func(q Querier) error {
		res, err := q.ExecContext(ctx, `UPDATE scan_sessions SET status = ?, files_seen = ?, files_new = ?,
files_changed = ?, files_missing = ?, files_refused = ?, error_message = ?, finished_at = ?
WHERE id = ? AND status = 'running'`, status, c.Seen, c.New, c.Changed, c.Missing, c.Refused, msg, s.NowMS(), id)
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
// longer missing.
func (s *Store) UpsertFiles(ctx context.Context, sessionID int64, batch []FileStat) (newN, changedN int64, err error) {
	now := s.NowMS()
	err = s.TxOnPath(ctx, []WritePath{{"library_files", PathScanUpsert}}, func(tx *sql.Tx) error {
		// In a comparison a NULL ctime/dev/inode (a row from before 0012,
		// or a stat without them) yields NULL, which CASE treats as false.
		st, err := tx.PrepareContext(ctx, `INSERT INTO library_files(root, path, size_bytes, mtime_ns, ctime_ns, dev, inode,
  is_missing, needs_hash, last_seen_scan_id, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?7, ?8, ?9, 0, 1, ?5, ?6, ?6)
ON CONFLICT(path) DO UPDATE SET
  needs_hash = CASE WHEN `+changedSQL+` OR content_hash IS NULL THEN 1 ELSE needs_hash END,
  content_hash = CASE WHEN `+changedSQL+` THEN NULL ELSE content_hash END,
  hash_algorithm = CASE WHEN `+changedSQL+` THEN NULL ELSE hash_algorithm END,
  updated_at = CASE WHEN `+changedSQL+` OR is_missing <> 0 THEN excluded.updated_at ELSE updated_at END,
  root = excluded.root, size_bytes = excluded.size_bytes, mtime_ns = excluded.mtime_ns,
  ctime_ns = COALESCE(excluded.ctime_ns, ctime_ns), dev = COALESCE(excluded.dev, dev), inode = COALESCE(excluded.inode, inode),
  is_missing = 0, last_seen_scan_id = excluded.last_seen_scan_id
RETURNING created_at, updated_at, needs_hash`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, f := range batch {
			var created, updated int64
			var needs bool
			ctime, dev, inode := f.identArgs()
			if err := st.QueryRowContext(ctx, f.Root, f.Path, f.Size, f.MtimeNS, sessionID, now, ctime, dev, inode).Scan(&created, &updated, &needs); err != nil {
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

// MarkMissing flags every file of the fully walked roots that session did
// not see. Roots that could not be walked are not passed, so an unmounted
// disk never makes its files look deleted.
func (s *Store) MarkMissing(ctx context.Context, sessionID int64, roots []string) (int64, error) {
	if len(roots) == 0 {
		return 0, nil
	}
	args := []any{s.NowMS(), sessionID}
	for _, r := range roots {
		args = append(args, r)
	}
	var n int64
	err := s.OnPath(ctx, WritePath{"library_files", PathMarkMissing}, func(q Querier) error {
		res, err := q.ExecContext(ctx, `UPDATE library_files SET is_missing = 1, updated_at = ?
WHERE is_missing = 0 AND (last_seen_scan_id IS NULL OR last_seen_scan_id <> ?)
  AND root IN (?`+strings.Repeat(",?", len(roots)-1)+`)`, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
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
	for _, l := range LegalValues {
		if l.Table != "library_files" || l.Column != "hash_algorithm" {
			continue
		}
		for _, v := range l.Values {
			if v != algo {
				out = append(out, v)
			}
		}
	}
	return out
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
