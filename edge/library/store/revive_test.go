package store

import (
	"context"
	"testing"
	"time"
)

// A file trashed by a delete while a scan runs (two processes on one
// library.db), after the scan saw it at its path, stays missing when the
// scan records what it saw: it is not revived into its group until the next
// scan. A file marked missing before the scan started and found again is
// live again.
func TestScanDoesNotReviveFileTrashedDuringScan(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	job := insertJob(t, s, StatusRunning)
	first, err := s.StartScanSession(ctx, job, []string{"/lib"})
	if err != nil {
		t.Fatal(err)
	}
	stats := []FileStat{{Root: "/lib", Path: "/lib/trashed", Size: 10, MtimeNS: 1}, {Root: "/lib", Path: "/lib/back", Size: 10, MtimeNS: 1}}
	if _, _, err := s.UpsertFiles(ctx, first, stats); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishScanSession(ctx, first, StatusSucceeded, ScanCounts{}, ""); err != nil {
		t.Fatal(err)
	}
	id := func(path string) int64 {
		var id int64
		if err := s.DB.QueryRow(`SELECT id FROM library_files WHERE path = ?`, path).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// /lib/back went missing before the next scan (an earlier scan marked
	// it), and is back at its path.
	mustExec(t, s.DB, `UPDATE library_files SET is_missing = 1, updated_at = 1 WHERE path = '/lib/back'`)

	sid, err := s.StartScanSession(ctx, job, []string{"/lib"})
	if err != nil {
		t.Fatal(err)
	}
	// The scan has stat'ed both; a delete then trashes /lib/trashed, and
	// some other write touches the missing /lib/back's row (a hash
	// algorithm switch does): only a delete's decision keeps a row missing.
	mustExec(t, s.DB, `UPDATE library_files SET updated_at = ? WHERE path = '/lib/back'`, time.Now().Add(time.Hour).UnixMilli())
	if err := s.RecordDecision(ctx, Decision{JobID: job, GroupKey: "blake3:x", FileID: id("/lib/trashed"), Path: "/lib/trashed", Decision: "trashed", Reason: "duplicate"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpsertFiles(ctx, sid, stats); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{"/lib/trashed": true, "/lib/back": false} {
		var missing bool
		if err := s.DB.QueryRow(`SELECT is_missing FROM library_files WHERE path = ?`, path).Scan(&missing); err != nil {
			t.Fatal(err)
		}
		if missing != want {
			t.Errorf("%s: missing=%v, want %v", path, missing, want)
		}
	}
}
