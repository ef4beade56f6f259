package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrNotFound is matched by the API to answer 404.
var ErrNotFound = errors.New("not found")

// Job is one row of jobs as the API shows it.
type Job struct {
	ID             int64   `json:"id"`
	Kind           string  `json:"kind"`
	Status         string  `json:"status"`
	Payload        string  `json:"-"`
	WorkerID       *string `json:"worker_id"`
	HeartbeatAt    *int64  `json:"worker_heartbeat_at"`
	LeaseExpiresAt *int64  `json:"lease_expires_at"`
	ProcessedItems int64   `json:"processed_items"`
	TotalItems     *int64  `json:"total_items"`
	Progress       float64 `json:"progress"`
	ErrorCode      *string `json:"error_code"`
	ErrorMessage   *string `json:"error_message"`
	RetryCount     int64   `json:"retry_count"`
	RetryAfter     *int64  `json:"retry_after"`
	CreatedAt      int64   `json:"created_at"`
	StartedAt      *int64  `json:"started_at"`
	FinishedAt     *int64  `json:"finished_at"`
	UpdatedAt      int64   `json:"updated_at"`
}

// JobColumns is the select list matching ScanJob.
const JobColumns = `id, kind, status, payload, worker_id, worker_heartbeat_at, lease_expires_at,
processed_items, total_items, progress, error_code, error_message, retry_count, retry_after,
created_at, started_at, finished_at, updated_at`

type rowScanner interface{ Scan(dest ...any) error }

// ScanJob reads one row selected with JobColumns.
func ScanJob(r rowScanner) (Job, error) {
	var j Job
	err := r.Scan(&j.ID, &j.Kind, &j.Status, &j.Payload, &j.WorkerID, &j.HeartbeatAt, &j.LeaseExpiresAt,
		&j.ProcessedItems, &j.TotalItems, &j.Progress, &j.ErrorCode, &j.ErrorMessage, &j.RetryCount, &j.RetryAfter,
		&j.CreatedAt, &j.StartedAt, &j.FinishedAt, &j.UpdatedAt)
	return j, err
}

// GetJob returns job id or ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id int64) (Job, error) {
	j, err := ScanJob(s.DB.QueryRowContext(ctx, `SELECT `+JobColumns+` FROM jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return j, fmt.Errorf("job %d: %w", id, ErrNotFound)
	}
	return j, err
}

// ListJobs is the §6.1 keyset page: created_at DESC, id DESC, after the
// row whose id is cursor (0 for the first page). next is the tail id when
// more rows follow, else 0.
func (s *Store) ListJobs(ctx context.Context, cursor int64, limit int) (jobs []Job, next int64, err error) {
	q := `SELECT ` + JobColumns + ` FROM jobs ORDER BY created_at DESC, id DESC LIMIT ?`
	args := []any{limit + 1}
	if cursor > 0 {
		var anchor int64
		err := s.DB.QueryRowContext(ctx, `SELECT created_at FROM jobs WHERE id = ?`, cursor).Scan(&anchor)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, 0, fmt.Errorf("%w: no job %d to continue from", ErrBadCursor, cursor)
		}
		if err != nil {
			return nil, 0, err
		}
		q = `SELECT ` + JobColumns + ` FROM jobs WHERE created_at < ? OR (created_at = ? AND id < ?)
ORDER BY created_at DESC, id DESC LIMIT ?`
		args = []any{anchor, anchor, cursor, limit + 1}
	}
	rows, err := s.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		j, err := ScanJob(rows)
		if err != nil {
			return nil, 0, err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = jobs[limit-1].ID
	}
	return jobs, next, nil
}

// Group is one duplicate group of §6.2.
type Group struct {
	GroupKey       string `json:"group_key"`
	HashAlgorithm  string `json:"hash_algorithm"`
	ContentHashHex string `json:"content_hash_hex"`
	FileCount      int64  `json:"file_count"`
	TotalSizeBytes int64  `json:"total_size_bytes"`
}

// ListGroups is the §6.2 keyset page after cursor (nil for the first page).
func (s *Store) ListGroups(ctx context.Context, cursor *GroupCursor, limit int) (groups []Group, next *GroupCursor, err error) {
	after := ""
	if cursor != nil {
		after = SortKey(cursor.FileCount, cursor.TotalSizeBytes, cursor.HashAlgorithm, cursor.ContentHashHex)
	}
	rows, err := s.DB.QueryContext(ctx, `SELECT hash_algorithm, content_hash, file_count, total_size_bytes
FROM dedup_groups WHERE file_count > 1 AND sort_key > ? ORDER BY sort_key LIMIT ?`, after, limit+1)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var g Group
		if err := rows.Scan(&g.HashAlgorithm, &g.ContentHashHex, &g.FileCount, &g.TotalSizeBytes); err != nil {
			return nil, nil, err
		}
		g.GroupKey = g.HashAlgorithm + ":" + g.ContentHashHex
		groups = append(groups, g)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(groups) > limit {
		groups = groups[:limit]
		t := groups[limit-1]
		next = &GroupCursor{FileCount: t.FileCount, TotalSizeBytes: t.TotalSizeBytes, HashAlgorithm: t.HashAlgorithm, ContentHashHex: t.ContentHashHex}
	}
	return groups, next, nil
}

// File is one library_files row.
type File struct {
	ID            int64   `json:"id"`
	Root          string  `json:"root"`
	Path          string  `json:"path"`
	SizeBytes     int64   `json:"size_bytes"`
	MtimeNS       int64   `json:"mtime_ns"`
	IsMissing     bool    `json:"is_missing"`
	NeedsHash     bool    `json:"needs_hash"`
	HashAlgorithm *string `json:"hash_algorithm"`
	ContentHash   *string `json:"content_hash"`
	// CtimeNS, Dev and Inode are what the last scan saw besides size and
	// mtime; nil until a scan recorded them.
	CtimeNS *int64 `json:"-"`
	Dev     *int64 `json:"-"`
	Inode   *int64 `json:"-"`
}

// FileColumns is the select list matching scanFile.
const FileColumns = `id, root, path, size_bytes, mtime_ns, is_missing, needs_hash, hash_algorithm, content_hash, ctime_ns, dev, inode`

func scanFile(r rowScanner) (File, error) {
	var f File
	err := r.Scan(&f.ID, &f.Root, &f.Path, &f.SizeBytes, &f.MtimeNS, &f.IsMissing, &f.NeedsHash, &f.HashAlgorithm, &f.ContentHash,
		&f.CtimeNS, &f.Dev, &f.Inode)
	return f, err
}

// GetFile returns library file id or ErrNotFound.
func (s *Store) GetFile(ctx context.Context, id int64) (File, error) {
	f, err := scanFile(s.DB.QueryRowContext(ctx, `SELECT `+FileColumns+` FROM library_files WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return f, fmt.Errorf("file %d: %w", id, ErrNotFound)
	}
	return f, err
}

// GroupFiles is the §6.3 keyset page: files of group k by id ASC after
// cursor (0 for the first page).
func (s *Store) GroupFiles(ctx context.Context, k GroupKey, cursor int64, limit int) (files []File, next int64, err error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT `+FileColumns+` FROM library_files
WHERE is_missing = 0 AND needs_hash = 0 AND hash_algorithm = ? AND content_hash = ? AND id > ?
ORDER BY id LIMIT ?`, k.Algorithm, k.HashHex, cursor, limit+1)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, 0, err
		}
		files = append(files, f)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	if len(files) > limit {
		files = files[:limit]
		next = files[limit-1].ID
	}
	return files, next, nil
}

// GroupSize counts the live files of group k.
func (s *Store) GroupSize(ctx context.Context, k GroupKey) (int64, error) {
	var n int64
	err := s.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM library_files
WHERE is_missing = 0 AND needs_hash = 0 AND hash_algorithm = ? AND content_hash = ?`, k.Algorithm, k.HashHex).Scan(&n)
	return n, err
}
