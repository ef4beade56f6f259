package store

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// protocolValues is §3 of the protocol, spelled out here rather than read
// from LegalValues, so an edit of either shows up as a difference.
var protocolValues = map[[2]string][]string{
	{"jobs", "kind"}:                           {"scan", "hash", "delete", "thumbnail"},
	{"jobs", "status"}:                         {"pending", "running", "completed", "failed", "cancelled", "retryable"},
	{"scan_sessions", "status"}:                {"running", "succeeded", "failed"},
	{"library_files", "hash_algorithm"}:        {"blake3", "sha256"},
	{"thumbnails", "status"}:                   {"pending", "running", "ready", "failed"},
	{"thumbnails", "media_type"}:               {"image", "video"},
	{"thumbnails", "format"}:                   {"jpeg", "webp"},
	{"thumbnail_cleanup_jobs", "status"}:       {"pending", "running", "completed", "failed"},
	{"wal_maintenance_jobs", "requested_mode"}: {"passive", "restart", "truncate"},
	{"wal_maintenance_jobs", "status"}:         {"pending", "running", "retryable", "completed", "failed"},
}

// every value any §3 column allows: each column is also tried with the
// values of the others, so a value allowed in the wrong column is caught.
func allProtocolValues() []string {
	var out []string
	for _, vs := range protocolValues {
		for _, v := range vs {
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestLegalValuesMatchProtocol checks, on a migrated database, that each §3
// column accepts exactly its values on INSERT and on UPDATE: every value of
// its set, and none of the other columns' values, nor an uppercase one
// (§2).
func TestLegalValuesMatchProtocol(t *testing.T) {
	if len(LegalValues) != len(protocolValues) {
		t.Fatalf("LegalValues has %d columns, §3 has %d", len(LegalValues), len(protocolValues))
	}
	for _, l := range LegalValues {
		want, ok := protocolValues[[2]string{l.Table, l.Column}]
		if !ok || !slices.Equal(slices.Sorted(slices.Values(l.Values)), slices.Sorted(slices.Values(want))) {
			t.Errorf("LegalValues %s.%s = %v, §3 says %v", l.Table, l.Column, l.Values, want)
		}
	}
	s := openTest(t)
	// Rows that satisfy every other constraint of their table; the column
	// under test is then set to each candidate.
	base := map[string]string{
		"jobs":                   `INSERT INTO jobs(kind, status) VALUES ('delete', 'completed')`,
		"scan_sessions":          `INSERT INTO scan_sessions(status) VALUES ('succeeded')`,
		"library_files":          `INSERT INTO library_files(path) VALUES ('/lib/%d')`,
		"thumbnails":             `INSERT INTO thumbnails(status) VALUES ('ready')`,
		"thumbnail_cleanup_jobs": `INSERT INTO thumbnail_cleanup_jobs(status) VALUES ('completed')`,
		"wal_maintenance_jobs":   `INSERT INTO wal_maintenance_jobs(status) VALUES ('completed')`,
	}
	n := 0
	for col, allowed := range protocolValues {
		table, column := col[0], col[1]
		candidates := append(allProtocolValues(), "", strings.ToUpper(allowed[0]))
		for _, v := range candidates {
			legal := slices.Contains(allowed, v)
			t.Run(fmt.Sprintf("%s.%s=%q", table, column, v), func(t *testing.T) {
				n++
				q := base[table]
				if table == "library_files" {
					q = fmt.Sprintf(q, n) // path is unique
				}
				res, err := s.DB.Exec(q)
				if err != nil {
					t.Fatal(err)
				}
				id, _ := res.LastInsertId()
				if column == "status" && table == "jobs" && legal && (v == "pending" || v == "running") {
					// the single active scan/hash index would refuse a second one
					mustExec(t, s.DB, `UPDATE jobs SET kind = 'delete' WHERE id = ?`, id)
				}
				_, err = s.DB.Exec(fmt.Sprintf("UPDATE %s SET %s = ? WHERE rowid = ?", table, column), v, id)
				if (err == nil) != legal {
					t.Errorf("UPDATE to %q: err=%v, want legal=%v", v, err, legal)
				}
				q = fmt.Sprintf("INSERT INTO %s(%s) VALUES (?)", table, column)
				if table == "library_files" {
					q = fmt.Sprintf("INSERT INTO library_files(path, hash_algorithm) VALUES ('/ins/%d', ?)", n)
				}
				if table == "jobs" && column == "status" {
					q = "INSERT INTO jobs(kind, status) VALUES ('delete', ?)"
				}
				if table == "jobs" && column == "kind" {
					q = "INSERT INTO jobs(kind, status) VALUES (?, 'completed')"
				}
				_, err = s.DB.Exec(q, v)
				if (err == nil) != legal {
					t.Errorf("INSERT of %q: err=%v, want legal=%v", v, err, legal)
				}
			})
		}
	}
}
