package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vesta-cx/euterpe/daemon"
)

// fixedClock sets s's clock to ms (Unix milliseconds).
func fixedClock(s *Store, ms int64) { s.Now = func() time.Time { return time.UnixMilli(ms) } }

// insertJob adds a scan job in status and returns its id.
func insertJob(t *testing.T, s *Store, status string) int64 {
	t.Helper()
	var id int64
	if err := s.DB.QueryRow(`INSERT INTO jobs(kind, status) VALUES ('scan', ?) RETURNING id`, status).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

type sessionRow struct {
	status   string
	finished *int64
	msg      *string
}

func session(t *testing.T, s *Store, id int64) sessionRow {
	t.Helper()
	var r sessionRow
	if err := s.DB.QueryRow(`SELECT status, finished_at, error_message FROM scan_sessions WHERE id = ?`, id).
		Scan(&r.status, &r.finished, &r.msg); err != nil {
		t.Fatal(err)
	}
	return r
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// TestCloseStaleScanSessions: a running session whose job is not running
// (its process was killed and the lease recovered, or the job gave up) is
// closed as failed with a finish time; the session of a running job, and
// finished sessions, are left alone.
func TestCloseStaleScanSessions(t *testing.T) {
	const now = int64(1_700_000_000_000)
	cases := []struct {
		name      string
		jobStatus string // "" = the job row does not exist
		session   string
		closed    bool
	}{
		{"job still running", StatusRunning, StatusRunning, false},
		{"job recovered after a crash", StatusRetryable, StatusRunning, true},
		{"job requeued", StatusPending, StatusRunning, true},
		{"job gave up", StatusFailed, StatusRunning, true},
		{"job completed", StatusCompleted, StatusRunning, true},
		{"job row gone", "", StatusRunning, true},
		{"session already failed", StatusRetryable, StatusFailed, false},
		{"session already succeeded", StatusCompleted, StatusSucceeded, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			fixedClock(s, now)
			jobID := int64(99)
			if c.jobStatus != "" {
				jobID = insertJob(t, s, c.jobStatus)
			}
			var sid int64
			if err := s.DB.QueryRow(`INSERT INTO scan_sessions(job_id, status, started_at) VALUES (?, ?, 1) RETURNING id`,
				jobID, c.session).Scan(&sid); err != nil {
				t.Fatal(err)
			}
			n, err := s.CloseStaleScanSessions(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := session(t, s, sid)
			if !c.closed {
				if n != 0 || got.status != c.session || got.finished != nil {
					t.Fatalf("closed %d; session %s finished %v", n, got.status, got.finished)
				}
				return
			}
			want := fmt.Sprintf("interrupted: job %d is no longer running", jobID)
			if n != 1 || got.status != StatusFailed || got.finished == nil || *got.finished != now || str(got.msg) != want {
				t.Fatalf("closed %d; session %s finished %v %q, want failed at %d %q", n, got.status, got.finished, str(got.msg), now, want)
			}
		})
	}
}

// TestStartScanSessionClosesEarlierRun: when a job runs again (its earlier
// run was killed mid-scan), the new session closes the one the earlier run
// left running, in the same transaction.
func TestStartScanSessionClosesEarlierRun(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	fixedClock(s, 1000)
	job := insertJob(t, s, StatusRunning)
	first, err := s.StartScanSession(ctx, job, []string{"/lib"})
	if err != nil {
		t.Fatal(err)
	}
	// The run is killed: nothing finishes first. The job runs again.
	fixedClock(s, 2000)
	second, err := s.StartScanSession(ctx, job, []string{"/lib"})
	if err != nil {
		t.Fatal(err)
	}
	old := session(t, s, first)
	want := fmt.Sprintf("interrupted: job %d ran again as scan session %d", job, second)
	if old.status != StatusFailed || old.finished == nil || *old.finished != 2000 || str(old.msg) != want {
		t.Fatalf("earlier session %s finished %v %q, want failed at 2000 %q", old.status, old.finished, str(old.msg), want)
	}
	if cur := session(t, s, second); cur.status != StatusRunning || cur.finished != nil {
		t.Fatalf("new session %s finished %v", cur.status, cur.finished)
	}
	// A closed session cannot be finished by the run that lost it.
	if err := s.FinishScanSession(ctx, first, StatusSucceeded, ScanCounts{}, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("finish of the closed session = %v", err)
	}
}

// TestClosedSessionWritesNothing: a run whose session was closed (it lost
// its lease, and the job ran again) may neither record files nor mark any
// missing: a file recorded under the old session after the new one saw it
// would be marked missing by the new one.
func TestClosedSessionWritesNothing(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	job := insertJob(t, s, StatusRunning)
	old, err := s.StartScanSession(ctx, job, []string{"/lib"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpsertFiles(ctx, old, []FileStat{{Root: "/lib", Path: "/lib/a", Size: 1, MtimeNS: 1}}); err != nil {
		t.Fatal(err)
	}
	cur, err := s.StartScanSession(ctx, job, []string{"/lib"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpsertFiles(ctx, cur, []FileStat{{Root: "/lib", Path: "/lib/b", Size: 1, MtimeNS: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpsertFiles(ctx, old, []FileStat{{Root: "/lib", Path: "/lib/b", Size: 1, MtimeNS: 1}}); !errors.Is(err, ErrScanSessionClosed) {
		t.Fatalf("upsert under the closed session = %v, want ErrScanSessionClosed", err)
	}
	if m, err := s.MarkMissing(ctx, old, []WalkedRoot{{Root: "/lib"}}); !errors.Is(err, ErrScanSessionClosed) || m.Marked != 0 {
		t.Fatalf("mark missing under the closed session = %d, %v", m.Marked, err)
	}
	var missing int
	s.DB.QueryRow(`SELECT COUNT(*) FROM library_files WHERE is_missing = 1`).Scan(&missing)
	var seen int64
	s.DB.QueryRow(`SELECT last_seen_scan_id FROM library_files WHERE path = '/lib/b'`).Scan(&seen)
	if missing != 0 || seen != cur {
		t.Fatalf("%d files missing, /lib/b last seen by session %d (want 0, %d)", missing, seen, cur)
	}
}

// TestMarkMissingKeepsUnreadPaths: files the scan did not see are marked
// missing, except those at or under a path it could not read.
func TestMarkMissingKeepsUnreadPaths(t *testing.T) {
	files := []string{"/lib/seen", "/lib/gone", "/lib/locked/a", "/lib/locked/sub/b", "/lib/lockedx/c", "/lib/denied.flac",
		"/other/gone"}
	cases := []struct {
		name   string
		unread []string
		want   []string // marked missing
	}{
		{"nothing unread", nil, []string{"/lib/denied.flac", "/lib/gone", "/lib/locked/a", "/lib/locked/sub/b", "/lib/lockedx/c", "/other/gone"}},
		{"a directory", []string{"/lib/locked"}, []string{"/lib/denied.flac", "/lib/gone", "/lib/lockedx/c", "/other/gone"}},
		{"a directory and a file", []string{"/lib/locked", "/lib/denied.flac"}, []string{"/lib/gone", "/lib/lockedx/c", "/other/gone"}},
		{"a subdirectory", []string{"/lib/locked/sub"}, []string{"/lib/denied.flac", "/lib/gone", "/lib/locked/a", "/lib/lockedx/c", "/other/gone"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			ctx := context.Background()
			job := insertJob(t, s, StatusRunning)
			first, _ := s.StartScanSession(ctx, job, []string{"/lib", "/other"})
			for _, p := range files {
				root := "/lib"
				if p == "/other/gone" {
					root = "/other"
				}
				if _, _, err := s.UpsertFiles(ctx, first, []FileStat{{Root: root, Path: p, Size: 1, MtimeNS: 1}}); err != nil {
					t.Fatal(err)
				}
			}
			s.FinishScanSession(ctx, first, StatusSucceeded, ScanCounts{}, "")
			sid, _ := s.StartScanSession(ctx, job, []string{"/lib", "/other"})
			if _, _, err := s.UpsertFiles(ctx, sid, []FileStat{{Root: "/lib", Path: "/lib/seen", Size: 1, MtimeNS: 1}}); err != nil {
				t.Fatal(err)
			}
			m, err := s.MarkMissing(ctx, sid, []WalkedRoot{{Root: "/lib", Unread: c.unread}, {Root: "/other"}})
			n := m.Marked
			if err != nil {
				t.Fatal(err)
			}
			got := missingPaths(t, s)
			if !slices.Equal(got, c.want) || n != int64(len(c.want)) {
				t.Fatalf("marked %d missing: %v, want %v", n, got, c.want)
			}
		})
	}
}

// A database at version 12 gets scan_sessions.paths_unreadable and the
// running-session index from 0013; its sessions are kept.
func TestMigration0013AddsScanSessionRecovery(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for _, q := range []string{
		`DROP INDEX ix_scan_sessions_running`,
		`ALTER TABLE scan_sessions DROP COLUMN paths_unreadable`,
		`DELETE FROM schema_migrations WHERE version = 13`,
		`INSERT INTO scan_sessions(job_id, status, files_seen, started_at) VALUES (1, 'succeeded', 7, 1)`,
	} {
		mustExec(t, s.DB, q)
	}
	if err := Migrate(ctx, s.DB); err != nil {
		t.Fatal(err)
	}
	if have, _ := TableColumns(ctx, s.DB, "scan_sessions"); !have["paths_unreadable"] {
		t.Fatal("scan_sessions.paths_unreadable missing after 0013")
	}
	var n int
	s.DB.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'ix_scan_sessions_running'`).Scan(&n)
	if n != 1 {
		t.Fatal("ix_scan_sessions_running missing after 0013")
	}
	s.DB.QueryRow(`SELECT COUNT(*) FROM scan_sessions WHERE files_seen = 7 AND paths_unreadable = 0`).Scan(&n)
	if n != 1 {
		t.Fatal("scan session not kept")
	}
	if v, _ := AppliedVersions(ctx, s.DB); !slices.Contains(v, 13) {
		t.Fatalf("versions %v", v)
	}
}

// TestFinishScanSessionCapsMessage: the message a session is finished with
// is stored capped at daemon.MaxMessage bytes, whole UTF-8 sequences only,
// whatever the caller passed (a failed MarkMissing hands its error text on
// unchanged, and it can name a path of any length).
func TestFinishScanSessionCapsMessage(t *testing.T) {
	long := strings.Repeat("/very/long/directory", 100)
	cases := []struct {
		name, status, msg string
		want              string // "" = no message stored
	}{
		{"no message", StatusSucceeded, "", ""},
		{"short message kept", StatusFailed, "mark missing: disk I/O error", "mark missing: disk I/O error"},
		{"long failure capped", StatusFailed, "mark missing: " + long, ("mark missing: " + long)[:daemon.MaxMessage]},
		{"long summary capped", StatusSucceeded, "3 paths not read: " + long, ("3 paths not read: " + long)[:daemon.MaxMessage]},
		{"cut before a split rune", StatusFailed, "x" + strings.Repeat("é", daemon.MaxMessage), "x" + strings.Repeat("é", daemon.MaxMessage/2-1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			ctx := context.Background()
			sid, err := s.StartScanSession(ctx, insertJob(t, s, StatusRunning), []string{"/lib"})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.FinishScanSession(ctx, sid, c.status, ScanCounts{}, c.msg); err != nil {
				t.Fatal(err)
			}
			got := session(t, s, sid)
			if got.status != c.status {
				t.Fatalf("status %s, want %s", got.status, c.status)
			}
			if c.want == "" {
				if got.msg != nil {
					t.Fatalf("message %q stored, want none", *got.msg)
				}
				return
			}
			if got.msg == nil || *got.msg != c.want || len(*got.msg) > daemon.MaxMessage || !utf8.ValidString(*got.msg) {
				t.Fatalf("message of %d bytes stored (%q…), want the first %d", len(str(got.msg)), str(got.msg)[:min(len(str(got.msg)), 40)], len(c.want))
			}
		})
	}
}
