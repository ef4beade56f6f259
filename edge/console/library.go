package console

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// Group is a duplicate group with its files, for the library page.
type Group struct {
	store.Group
	Files []store.File
	More  bool // the group has more files than the page shows
}

// LibraryView is what the library page shows.
type LibraryView struct {
	Groups       []Group
	MoreGroups   bool
	Activity     []store.Job // the latest scan, hash and delete jobs
	Session      *ScanSession
	WALBytes     int64
	WALPath      string
	Checkpoint   *Checkpoint
	TrashDir     string
	TrashRetains string // EUTERPE_LIBRARY_TRASH_RETENTION, "" when kept forever
}

// ScanSession is the latest row of scan_sessions.
type ScanSession struct {
	ID                                   int64
	Status                               string
	Seen, New, Changed, Missing, Refused int64
	// Unreadable counts the directories and files the scan could not
	// read; their catalogued files kept their state.
	Unreadable int64
	StartedMS  int64
	FinishedMS *int64
	Error      *string
}

// Checkpoint is the latest finished WAL checkpoint job.
type Checkpoint struct {
	ID          int64
	Mode        string
	Status      string
	FinishedMS  *int64
	LogFrames   *int64
	Checkpointd *int64
	Error       *string
}

const (
	groupsPerPage = 20
	filesPerGroup = 24
)

// ReadLibrary reads the library page's data from the library database.
func ReadLibrary(ctx context.Context, l *library.Library) (LibraryView, error) {
	var v LibraryView
	st := l.Store
	groups, next, err := st.ListGroups(ctx, nil, groupsPerPage)
	if err != nil {
		return v, fmt.Errorf("duplicate groups: %w", err)
	}
	v.MoreGroups = next != nil
	for _, g := range groups {
		k, err := store.ParseGroupKey(g.GroupKey)
		if err != nil {
			return v, err
		}
		files, more, err := st.GroupFiles(ctx, k, 0, filesPerGroup)
		if err != nil {
			return v, fmt.Errorf("files of %s: %w", g.GroupKey, err)
		}
		v.Groups = append(v.Groups, Group{Group: g, Files: files, More: more > 0})
	}
	rows, err := st.DB.QueryContext(ctx, `SELECT `+store.JobColumns+` FROM jobs
WHERE kind IN ('scan', 'hash', 'delete') ORDER BY created_at DESC, id DESC LIMIT 8`)
	if err != nil {
		return v, fmt.Errorf("library jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		j, err := store.ScanJob(rows)
		if err != nil {
			return v, err
		}
		j.ErrorMessage = capPtr(j.ErrorMessage)
		v.Activity = append(v.Activity, j)
	}
	if err := rows.Err(); err != nil {
		return v, err
	}
	var s ScanSession
	err = st.DB.QueryRowContext(ctx, `SELECT id, status, files_seen, files_new, files_changed, files_missing,
files_refused, paths_unreadable, started_at, finished_at, error_message FROM scan_sessions ORDER BY id DESC LIMIT 1`).Scan(
		&s.ID, &s.Status, &s.Seen, &s.New, &s.Changed, &s.Missing, &s.Refused, &s.Unreadable, &s.StartedMS, &s.FinishedMS, &s.Error)
	switch {
	case err == nil:
		s.Error = capPtr(s.Error)
		v.Session = &s
	case !errors.Is(err, sql.ErrNoRows):
		return v, fmt.Errorf("scan sessions: %w", err)
	}
	var c Checkpoint
	err = st.DB.QueryRowContext(ctx, `SELECT id, requested_mode, status, finished_at, checkpoint_log_frames,
checkpointed_frames, error_message FROM wal_maintenance_jobs WHERE finished_at IS NOT NULL
ORDER BY finished_at DESC, id DESC LIMIT 1`).Scan(&c.ID, &c.Mode, &c.Status, &c.FinishedMS, &c.LogFrames, &c.Checkpointd, &c.Error)
	switch {
	case err == nil:
		c.Error = capPtr(c.Error)
		v.Checkpoint = &c
	case !errors.Is(err, sql.ErrNoRows):
		return v, fmt.Errorf("checkpoints: %w", err)
	}
	v.WALPath = l.Scheduler.WALPath
	v.WALBytes, err = fileSize(v.WALPath)
	if err != nil {
		return v, err
	}
	v.TrashDir = l.Trash.Dir
	if l.Trash.Retention > 0 {
		v.TrashRetains = l.Trash.Retention.String()
	}
	return v, nil
}

// capPtr caps a stored error message for display (daemon.CapMessage): the
// library caps what it writes, but the database may hold rows an older
// version wrote.
func capPtr(s *string) *string {
	if s == nil {
		return nil
	}
	c := daemon.CapMessage(*s)
	return &c
}

// fileSize is the size of path, 0 when it does not exist (no WAL yet, or
// just truncated away).
func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("WAL size: %w", err)
	}
	return fi.Size(), nil
}
