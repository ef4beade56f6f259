package executor_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// guardFixtures inserts one row in every guarded table and returns the
// WHERE clause selecting it.
func guardFixtures(t *testing.T, e *env) map[string]string {
	t.Helper()
	jobID := insertRow(t, e, "jobs", map[string]any{"kind": "scan", "status": "running", "worker_id": "w", "lease_expires_at": 5})
	sid := insertRow(t, e, "scan_sessions", map[string]any{"job_id": jobID, "status": "running"})
	fid := insertRow(t, e, "library_files", map[string]any{"root": e.root, "path": e.root + "/f", "size_bytes": 3,
		"hash_algorithm": "blake3", "content_hash": strings.Repeat("ab", 32), "needs_hash": 0, "hashed_at": 1, "last_seen_scan_id": sid})
	thumb := insertRow(t, e, "thumbnails", map[string]any{"file_id": fid, "group_key": "g", "status": "running"})
	cleanup := insertRow(t, e, "thumbnail_cleanup_jobs", map[string]any{"group_key": "g", "status": "running"})
	wal := insertRow(t, e, "wal_maintenance_jobs", map[string]any{"status": "running"})
	dec := insertRow(t, e, "delete_decisions", map[string]any{"job_id": jobID, "group_key": "g", "file_id": fid, "path": "p",
		"decision": "keep", "reason": "r", "decided_at": 1})
	insertRow(t, e, "io_rate_limits", map[string]any{"bucket_key": executor.ThumbnailIOBucket})
	return map[string]string{
		"jobs": fmt.Sprint("id = ", jobID), "scan_sessions": fmt.Sprint("id = ", sid),
		"library_files": fmt.Sprint("id = ", fid), "thumbnails": fmt.Sprint("id = ", thumb),
		"thumbnail_cleanup_jobs": fmt.Sprint("id = ", cleanup), "wal_maintenance_jobs": fmt.Sprint("id = ", wal),
		"delete_decisions": fmt.Sprint("id = ", dec), "io_rate_limits": "bucket_key = '" + executor.ThumbnailIOBucket + "'",
	}
}

// changeExpr is an assignment that changes column c of table to a value
// its legal-value trigger accepts.
func changeExpr(table, c string) string {
	for _, l := range store.LegalValues {
		if l.Table == table && l.Column == c {
			return fmt.Sprintf("%[1]s = CASE WHEN %[1]s IS '%[2]s' THEN '%[3]s' ELSE '%[2]s' END", c, l.Values[0], l.Values[1])
		}
	}
	return fmt.Sprintf("%[1]s = CASE WHEN %[1]s IS NULL THEN 7 ELSE NULL END", c)
}

// marked runs q as a write of table's path, the way executor and catalog
// statements run when the store marks paths.
func marked(e *env, table, path, q string) error {
	return e.st.OnPath(context.Background(), store.WritePath{Table: table, Path: path}, func(db store.Querier) error {
		_, err := db.ExecContext(context.Background(), q)
		return err
	})
}

// TestGuardTriggersPerPath changes, for every write path of every guarded
// table, each column another path of the table may write but this one may
// not, inside that path's mark: every such UPDATE must abort.
func TestGuardTriggersPerPath(t *testing.T) {
	e := newEnv(t, true)
	where := guardFixtures(t, e)
	checked := 0
	for table, paths := range executor.GuardedPaths() {
		union := executor.Writable(table)
		for path, cols := range paths {
			for _, c := range union {
				if slices.Contains(cols, c) {
					continue
				}
				q := "UPDATE " + table + " SET " + changeExpr(table, c) + " WHERE " + where[table]
				err := marked(e, table, path, q)
				if err == nil || !strings.Contains(err.Error(), "whitelist violation on "+table+" ("+path+" path)") {
					t.Errorf("%s.%s path writing %s: err = %v, want whitelist violation", table, path, c, err)
				}
				checked++
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d forbidden per-path writes checked", checked)
	}
}

func TestGuardTriggersNamedCases(t *testing.T) {
	e := newEnv(t, true)
	where := guardFixtures(t, e)
	cases := []struct {
		name, table, path, set string
		ok                     bool
	}{
		{"claim path may not write heartbeat-only progress", "jobs", "claim", "progress = 0.5", false},
		{"claim path may not write heartbeat-only processed_items", "jobs", "claim", "processed_items = 9", false},
		{"heartbeat path writes progress", "jobs", "heartbeat", "progress = 0.5, updated_at = 2", true},
		{"heartbeat path may not write status", "jobs", "heartbeat", "status = 'completed'", false},
		{"thumbnail heartbeat may not write width", "thumbnails", "heartbeat", "width = 10", false},
		{"cleanup claim may not write error_code", "thumbnail_cleanup_jobs", "claim", "error_code = 'x'", false},
		{"wal recover may not write checkpoint stats", "wal_maintenance_jobs", "recover", "checkpoint_busy = 1", false},
		{"unknown path aborts", "jobs", "no_such_path", "updated_at = 3", false},
		{"mark_missing may not clear a hash", "library_files", store.PathMarkMissing, "content_hash = NULL", false},
		{"record_hash writes a hash", "library_files", store.PathRecordHash, "content_hash = '" + strings.Repeat("cd", 32) + "', updated_at = 4", true},
		{"record_decision may not write needs_hash", "library_files", store.PathRecordDecision, "needs_hash = 1", false},
		{"scan_finish may not write job_id", "scan_sessions", store.PathScanFinish, "job_id = 99", false},
		{"scan_recover closes a session", "scan_sessions", store.PathScanRecover, "status = 'failed', finished_at = 5, error_message = 'interrupted'", true},
		{"scan_recover may not write counts", "scan_sessions", store.PathScanRecover, "files_missing = 3", false},
		{"delete_decisions are append-only", "delete_decisions", store.PathRecordDecision, "reason = 'other'", false},
		{"io reserve may not rename its bucket", "io_rate_limits", "reserve", "bucket_key = 'other'", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := marked(e, c.table, c.path, "UPDATE "+c.table+" SET "+c.set+" WHERE "+where[c.table])
			if c.ok && err != nil {
				t.Fatalf("allowed write refused: %v", err)
			}
			if !c.ok && (err == nil || !strings.Contains(err.Error(), "whitelist violation")) {
				t.Fatalf("err = %v, want whitelist violation", err)
			}
		})
	}
	// Unmarked writes (fixtures, policy) are held to the union of the paths.
	for _, q := range []string{
		`UPDATE delete_decisions SET reason = 'x'`,
		`UPDATE library_files SET path = '/elsewhere'`,
		`UPDATE scan_sessions SET roots = '[]x'`,
	} {
		if _, err := e.st.DB.Exec(q); err == nil || !strings.Contains(err.Error(), "whitelist") {
			t.Errorf("%s: err = %v, want whitelist violation", q, err)
		}
	}
	// The marks never outlive their write.
	var n int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM ` + store.PathMarkTable).Scan(&n)
	if n != 0 {
		t.Fatalf("%d marks left behind", n)
	}
}
