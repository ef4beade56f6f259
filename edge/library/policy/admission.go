package policy

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// Errors the API maps to status codes.
var (
	ErrActive      = errors.New("a scan or hash job is already pending or running")
	ErrQueueFull   = errors.New("thumbnail queue is full")
	ErrUnsupported = errors.New("no thumbnail for this media type")
	ErrInvalid     = errors.New("invalid request")
	ErrConflict    = errors.New("request conflicts with the current library state")
)

// Policy holds the control-plane rules. Configure the fields before use.
type Policy struct {
	Store *store.Store
	// HashAlgorithm is used for hash jobs (blake3 or sha256).
	HashAlgorithm string
	// ThumbQueueCapacity bounds pending+running thumbnails.
	ThumbQueueCapacity int
	// ThumbMaxAttempts stops requeueing a thumbnail after this many failures.
	ThumbMaxAttempts int
	// ThumbsDir is where thumbnail cache files go (real path).
	ThumbsDir string
	// CleanupDelay is how long after a delete its group's thumbnails go.
	CleanupDelay time.Duration
	// MaxJobRetries is how many times a recovered scan or hash job is run
	// again before it fails; 0 fails it at its first recovery. A delete is
	// retried until it ends.
	MaxJobRetries int
	// Wake is called after work is enqueued (the executor's Wake).
	Wake func()
}

func (p *Policy) wake() {
	if p.Wake != nil {
		p.Wake()
	}
}

// IsUnique reports a UNIQUE constraint violation.
func IsUnique(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (p *Policy) insertJob(ctx context.Context, kind string, payload any) (store.Job, error) {
	j, err := p.insertJobIn(ctx, p.Store.DB, kind, payload)
	if err == nil {
		p.wake()
	}
	return j, err
}

// insertJobIn adds a pending job through q without waking the executor: a
// job inserted in a transaction is not claimable before the commit.
func (p *Policy) insertJobIn(ctx context.Context, q querier, kind string, payload any) (store.Job, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return store.Job{}, err
	}
	now := p.Store.NowMS()
	j, err := store.ScanJob(q.QueryRowContext(ctx, `INSERT INTO jobs(kind, status, payload, created_at, updated_at)
VALUES (?, 'pending', ?, ?, ?) RETURNING `+store.JobColumns, kind, string(b), now, now))
	if IsUnique(err) {
		return store.Job{}, ErrActive
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("enqueue %s: %w", kind, err)
	}
	return j, nil
}

// EnqueueScan adds a pending scan job; ErrActive while a scan or hash job
// is pending or running (the unique index decides, so concurrent requests
// cannot both win).
func (p *Policy) EnqueueScan(ctx context.Context) (store.Job, error) {
	return p.insertJob(ctx, store.KindScan, struct{}{})
}

// hashAlgorithm is the configured algorithm (blake3 when unset).
func (p *Policy) hashAlgorithm() string {
	if p.HashAlgorithm == "" {
		return store.AlgoBLAKE3
	}
	return p.HashAlgorithm
}

// EnqueueHash adds a pending hash job with the configured algorithm. Files
// hashed with another algorithm (the setting was changed) are put back in
// the hash queue first, so the pass re-hashes them and their duplicates
// group again under one algorithm; a hash pass only hashes needs_hash rows.
func (p *Policy) EnqueueHash(ctx context.Context) (store.Job, error) {
	algo := p.hashAlgorithm()
	if _, err := p.Store.MarkOtherAlgorithm(ctx, algo); err != nil {
		return store.Job{}, fmt.Errorf("enqueue hash: %w", err)
	}
	return p.insertJob(ctx, store.KindHash, store.HashPayload{Algorithm: algo})
}

// WALJob is one wal_maintenance_jobs row.
type WALJob struct {
	ID                  int64   `json:"id"`
	RequestedMode       string  `json:"requested_mode"`
	Status              string  `json:"status"`
	ExecuteAfter        int64   `json:"execute_after"`
	RetryCount          int64   `json:"retry_count"`
	RetryAfter          *int64  `json:"retry_after"`
	CheckpointBusy      *int64  `json:"checkpoint_busy"`
	CheckpointLogFrames *int64  `json:"checkpoint_log_frames"`
	CheckpointedFrames  *int64  `json:"checkpointed_frames"`
	ErrorCode           *string `json:"error_code"`
	ErrorMessage        *string `json:"error_message"`
	CreatedAt           int64   `json:"created_at"`
}

// EnqueueWAL adds a pending checkpoint of mode (passive, restart,
// truncate), due now.
func (p *Policy) EnqueueWAL(ctx context.Context, mode string) (WALJob, error) {
	mode = strings.ToLower(mode)
	if mode != store.ModePassive && mode != store.ModeRestart && mode != store.ModeTruncate {
		return WALJob{}, fmt.Errorf("%w: unknown mode %q (want passive, restart or truncate)", ErrInvalid, mode)
	}
	now := p.Store.NowMS()
	var w WALJob
	err := p.Store.DB.QueryRowContext(ctx, `INSERT INTO wal_maintenance_jobs(requested_mode, status, execute_after, created_at, updated_at)
VALUES (?, 'pending', ?, ?, ?) RETURNING id, requested_mode, status, execute_after, retry_count, retry_after,
checkpoint_busy, checkpoint_log_frames, checkpointed_frames, error_code, error_message, created_at`, mode, now, now, now).
		Scan(&w.ID, &w.RequestedMode, &w.Status, &w.ExecuteAfter, &w.RetryCount, &w.RetryAfter,
			&w.CheckpointBusy, &w.CheckpointLogFrames, &w.CheckpointedFrames, &w.ErrorCode, &w.ErrorMessage, &w.CreatedAt)
	if err != nil {
		return w, fmt.Errorf("enqueue wal maintenance: %w", err)
	}
	p.wake()
	return w, nil
}

// Thumb is one thumbnails row as the API reports it.
type Thumb struct {
	ID           int64   `json:"id"`
	FileID       int64   `json:"file_id"`
	Status       string  `json:"status"`
	MediaType    string  `json:"media_type"`
	Format       string  `json:"format"`
	MaxSize      int     `json:"max_size"`
	OutputPath   string  `json:"-"`
	Width        *int64  `json:"width"`
	Height       *int64  `json:"height"`
	ErrorCode    *string `json:"error_code"`
	ErrorMessage *string `json:"error_message"`
	ErrorCount   int64   `json:"error_count"`
	RetryAfter   *int64  `json:"retry_after"`
	// What the row was admitted for: the file's group and its catalog
	// stat at the time (see sourceChanged).
	GroupKey    *string `json:"-"`
	SourceSize  *int64  `json:"-"`
	SourceMtime *int64  `json:"-"`
	SourceCtime *int64  `json:"-"`
}

const thumbCols = `id, file_id, status, media_type, format, max_size, output_path, width, height, error_code, error_message,
error_count, retry_after, group_key, source_size_bytes, source_mtime_ns, source_ctime_ns`

func scanThumb(r interface{ Scan(...any) error }) (Thumb, error) {
	var t Thumb
	err := r.Scan(&t.ID, &t.FileID, &t.Status, &t.MediaType, &t.Format, &t.MaxSize, &t.OutputPath, &t.Width, &t.Height,
		&t.ErrorCode, &t.ErrorMessage, &t.ErrorCount, &t.RetryAfter, &t.GroupKey, &t.SourceSize, &t.SourceMtime, &t.SourceCtime)
	return t, err
}

// MediaType classifies a path by extension: image, video, or "" when no
// thumbnail can be made.
func MediaType(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jpg", ".jpeg", ".png", ".gif", ".webp":
		return store.MediaImage
	case ".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi":
		return store.MediaVideo
	}
	return ""
}

// fileGroup is f's group key, nil while it has no current digest.
func fileGroup(f store.File) *string {
	if f.HashAlgorithm == nil || f.ContentHash == nil || f.NeedsHash {
		return nil
	}
	g := *f.HashAlgorithm + ":" + *f.ContentHash
	return &g
}

// sourceChanged reports whether t was admitted for another version of f
// than the catalog describes now: another size, mtime or ctime, or another
// duplicate group (the group's cleanup would then miss the row). A row
// without a stamp (admitted before 0012) cannot show what it was rendered
// from and counts as changed. An unrecorded ctime or group on either side
// is no difference: a file hashed after its thumbnail was admitted keeps
// its thumbnail.
func sourceChanged(t Thumb, f store.File) bool {
	if t.SourceSize == nil || t.SourceMtime == nil || *t.SourceSize != f.SizeBytes || *t.SourceMtime != f.MtimeNS {
		return true
	}
	if t.SourceCtime != nil && f.CtimeNS != nil && *t.SourceCtime != *f.CtimeNS {
		return true
	}
	g := fileGroup(f)
	return t.GroupKey != nil && g != nil && *t.GroupKey != *g
}

// replaceable reports a terminal row that must be rendered again rather
// than served or retried: its source changed, or (ready) its cache file is
// gone. ready and failed are the states a cleanup may delete (§4.4).
func replaceable(t Thumb, f store.File) bool {
	switch t.Status {
	case store.StatusReady:
		return sourceChanged(t, f) || !cacheFilePresent(t.OutputPath)
	case store.StatusFailed:
		return sourceChanged(t, f)
	}
	return false
}

func (p *Policy) latestThumb(ctx context.Context, fileID int64, format string, size int) (Thumb, error) {
	return scanThumb(p.Store.DB.QueryRowContext(ctx, `SELECT `+thumbCols+` FROM thumbnails
WHERE file_id = ? AND format = ? AND max_size = ? ORDER BY id DESC LIMIT 1`, fileID, format, size))
}

// AdmitThumbnail returns the thumbnail of f at format/size, admitting a
// new pending row when none exists. Admission is one conditional INSERT,
// so concurrent requests can never exceed ThumbQueueCapacity. A failed row
// is requeued only once its retry_after has passed. A ready or failed row
// made for another version of the file (sourceChanged), or a ready row
// whose cache file is gone, is replaced by a new pending row.
func (p *Policy) AdmitThumbnail(ctx context.Context, f store.File, format string, size int) (Thumb, error) {
	media := MediaType(f.Path)
	if media == "" {
		return Thumb{}, fmt.Errorf("%w: %s", ErrUnsupported, filepath.Ext(f.Path))
	}
	if f.IsMissing {
		return Thumb{}, fmt.Errorf("file %d is missing: %w", f.ID, store.ErrNotFound)
	}
	t, err := p.latestThumb(ctx, f.ID, format, size)
	var stale *Thumb
	if err == nil {
		switch {
		case replaceable(t, f):
			stale = &t
		case t.Status == store.StatusFailed:
			return p.requeueThumb(ctx, t)
		default:
			return t, nil
		}
	} else if !errors.Is(err, sql.ErrNoRows) {
		return t, err
	}
	out := filepath.Join(p.ThumbsDir, thumbName(f.ID, size, format))
	now := p.Store.NowMS()
	admit := func(q interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}) (Thumb, error) {
		return scanThumb(q.QueryRowContext(ctx, `INSERT INTO thumbnails(file_id, group_key, source_path, output_path,
  status, media_type, format, max_size, source_size_bytes, source_mtime_ns, source_ctime_ns, created_at, updated_at)
SELECT ?1, ?2, ?3, ?4, 'pending', ?5, ?6, ?7, ?10, ?11, ?12, ?8, ?8
WHERE (SELECT COUNT(*) FROM thumbnails WHERE status IN ('pending','running')) < ?9
  AND NOT EXISTS (SELECT 1 FROM thumbnails WHERE file_id = ?1 AND format = ?6 AND max_size = ?7)
RETURNING `+thumbCols, f.ID, fileGroup(f), f.Path, out, media, format, size, now, p.ThumbQueueCapacity,
			f.SizeBytes, f.MtimeNS, f.CtimeNS))
	}
	if stale != nil {
		// The row is replaced by a fresh pending one in one transaction,
		// under the same capacity rule. ready stays terminal (§4.3); the row
		// is deleted, as a cleanup would delete it (§4.4), and admitted
		// again.
		err = p.Store.Tx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `DELETE FROM thumbnails WHERE id = ? AND status = ?`, stale.ID, stale.Status)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				return sql.ErrNoRows // a concurrent request replaced it first
			}
			if t, err = admit(tx); err != nil {
				return err
			}
			// No renderer can hold the path now: the deleted row was the
			// file's only one and the new one is not committed yet.
			return p.removeCacheFile(stale.OutputPath)
		})
	} else {
		t, err = admit(p.Store.DB)
	}
	if errors.Is(err, sql.ErrNoRows) {
		// Either the queue is full or a concurrent request admitted it.
		t, err2 := p.latestThumb(ctx, f.ID, format, size)
		if err2 == nil && !replaceable(t, f) {
			return t, nil
		}
		return Thumb{}, ErrQueueFull
	}
	if err != nil {
		return t, err
	}
	p.wake()
	return t, nil
}

// removeCacheFile removes a replaced row's cache file, so a render that
// fails leaves no picture of the old content behind. Only a regular file
// inside the thumbnails directory (symlinks in its path resolved) is
// removed, as a cleanup would; a row pointing anywhere else is not ours to
// act on, and its path is left alone.
func (p *Policy) removeCacheFile(path string) error {
	if path == "" || !cacheFilePresent(path) {
		return nil
	}
	dir, err := pathsafe.NewDir(p.ThumbsDir)
	if err != nil {
		return fmt.Errorf("thumbnails directory: %w", err)
	}
	if dir.Contains(path) != nil {
		return nil
	}
	// Contains judged the cleaned path; the kernel would walk a ".." after
	// a symlink in the raw one elsewhere.
	if err := os.Remove(filepath.Clean(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale thumbnail %s: %w", path, err)
	}
	return nil
}

func (p *Policy) requeueThumb(ctx context.Context, t Thumb) (Thumb, error) {
	now := p.Store.NowMS()
	if t.RetryAfter != nil && *t.RetryAfter > now {
		return t, nil
	}
	if p.ThumbMaxAttempts > 0 && t.ErrorCount >= int64(p.ThumbMaxAttempts) {
		return t, nil
	}
	if err := store.ThumbnailMachine.Check(store.StatusFailed, store.StatusPending); err != nil {
		return t, err
	}
	nt, err := scanThumb(p.Store.DB.QueryRowContext(ctx, `UPDATE thumbnails SET status = 'pending', updated_at = ?1
WHERE id = ?2 AND status = 'failed' AND COALESCE(retry_after, 0) <= ?1
  AND (SELECT COUNT(*) FROM thumbnails WHERE status IN ('pending','running')) < ?3
RETURNING `+thumbCols, now, t.ID, p.ThumbQueueCapacity))
	if errors.Is(err, sql.ErrNoRows) {
		// Another request requeued or replaced it first, or the queue is
		// full: a row still failed and due waits for room, which is the
		// queue being full (429), not a render waiting for its retry_after.
		cur, err := p.latestThumb(ctx, t.FileID, t.Format, t.MaxSize)
		if err != nil {
			return t, err
		}
		if cur.ID == t.ID && cur.Status == store.StatusFailed && (cur.RetryAfter == nil || *cur.RetryAfter <= now) {
			return Thumb{}, ErrQueueFull
		}
		return cur, nil
	}
	if err == nil {
		p.wake()
	}
	return nt, err
}

// cacheFilePresent reports whether a ready thumbnail's cache file is still
// a regular file; anything else (removed, replaced) is rendered again.
func cacheFilePresent(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode().IsRegular()
}

func thumbName(fileID int64, size int, format string) string {
	ext := ".jpg"
	if format == store.FormatWebP {
		ext = ".webp"
	}
	return fmt.Sprintf("%d_%d%s", fileID, size, ext)
}
