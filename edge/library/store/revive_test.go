package store

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A file trashed by a delete while a scan runs (two processes on one
// library.db), after the scan saw it at its path, stays missing when the
// scan records what it saw: it is not revived into its group until the next
// scan. A file marked missing before the scan started and found again is
// live again, as is one an earlier delete trashed and the user put back,
// and one a delete during the scan only refused.
func TestScanDoesNotReviveFileTrashedDuringScan(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	job := insertJob(t, s, StatusRunning)
	first, err := s.StartScanSession(ctx, job, []string{"/lib"})
	if err != nil {
		t.Fatal(err)
	}
	stats := []FileStat{{Root: "/lib", Path: "/lib/trashed", Size: 10, MtimeNS: 1}, {Root: "/lib", Path: "/lib/back", Size: 10, MtimeNS: 1},
		{Root: "/lib", Path: "/lib/restored", Size: 10, MtimeNS: 1}, {Root: "/lib", Path: "/lib/refused", Size: 10, MtimeNS: 1}}
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
	// /lib/restored was trashed by an earlier delete and put back by hand.
	if err := s.RecordDecision(ctx, Decision{JobID: job, GroupKey: "blake3:x", FileID: id("/lib/restored"), Path: "/lib/restored", Decision: "trashed", Reason: "duplicate"}); err != nil {
		t.Fatal(err)
	}
	mustExec(t, s.DB, `UPDATE delete_decisions SET decided_at = 1 WHERE file_id = ?`, id("/lib/restored"))

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
	// /lib/refused was missing already; a delete during the scan refused it
	// (a refusal moves nothing).
	mustExec(t, s.DB, `UPDATE library_files SET is_missing = 1, updated_at = 1 WHERE path = '/lib/refused'`)
	if err := s.RecordDecision(ctx, Decision{JobID: job, GroupKey: "blake3:x", FileID: id("/lib/refused"), Path: "/lib/refused", Decision: "refused", Reason: "path check failed"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.UpsertFiles(ctx, sid, stats); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{"/lib/trashed": true, "/lib/back": false, "/lib/restored": false, "/lib/refused": false} {
		var missing bool
		if err := s.DB.QueryRow(`SELECT is_missing FROM library_files WHERE path = ?`, path).Scan(&missing); err != nil {
			t.Fatal(err)
		}
		if missing != want {
			t.Errorf("%s: missing=%v, want %v", path, missing, want)
		}
	}
}

// The scan's question of a missing row (did a delete trash it during the
// scan?) is answered through ix_delete_decisions_file (0014), not by
// reading every decision: the table only grows, and a root added back
// brings all of its rows back at once.
func TestTrashedSinceUsesTheIndex(t *testing.T) {
	s := openTest(t)
	args := make([]any, 10)
	for i := range args {
		args[i] = int64(1)
	}
	rows, err := s.DB.Query(`EXPLAIN QUERY PLAN SELECT `+trashedSinceSQL+` FROM library_files WHERE id = ?1 AND ?2 = ?3 AND ?4 = ?5 AND ?6 = ?7 AND ?8 = ?9`, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	joined := strings.Join(plan, "; ")
	if !strings.Contains(joined, "ix_delete_decisions_file") || strings.Contains(joined, "SCAN d") {
		t.Fatalf("plan: %s", joined)
	}
}
