package store

import (
	"context"
	"path/filepath"
	"testing"
)

// TestMigrationResolvesActiveScanHash is §5's migration-safe recovery on
// legacy job tables: enums lowercased, one deterministic winner kept among
// the active scan/hash rows, every other one made retryable with the
// recovery code, then the index rebuilt. A legacy build may already carry an
// index of that name whose predicate is case-sensitive: it let an uppercase
// active row ('RUNNING', the enum name) stand beside a lowercase one, so it
// must be gone before the rows are lowercased, not only before the rebuild.
func TestMigrationResolvesActiveScanHash(t *testing.T) {
	type job struct {
		kind, status string
		heartbeat    int64
	}
	caseSensitiveIndex := `CREATE UNIQUE INDEX ix_jobs_single_active_scan_hash ON jobs((1))
  WHERE status IN ('pending', 'running') AND kind IN ('scan', 'hash')`
	cases := []struct {
		name   string
		legacy []string // extra legacy DDL
		jobs   []job
		want   []string // status per job, in order
	}{
		{"running row with the latest heartbeat wins", nil,
			[]job{{"SCAN", "RUNNING", 100}, {"hash", "running", 300}, {"scan", "PENDING", 0}},
			[]string{StatusRetryable, StatusRunning, StatusRetryable}},
		{"without a running row the oldest pending row wins", nil,
			[]job{{"HASH", "PENDING", 0}, {"scan", "pending", 0}, {"Scan", "Pending", 0}},
			[]string{StatusPending, StatusRetryable, StatusRetryable}},
		{"a lone active row is kept", nil,
			[]job{{"SCAN", "RUNNING", 100}, {"hash", "completed", 0}},
			[]string{StatusRunning, StatusCompleted}},
		{"legacy case-sensitive index, uppercase running beside lowercase pending", []string{caseSensitiveIndex},
			[]job{{"SCAN", "RUNNING", 100}, {"hash", "pending", 0}},
			[]string{StatusRunning, StatusRetryable}},
		{"legacy case-sensitive index, enum names only", []string{caseSensitiveIndex},
			[]job{{"HASH", "RUNNING", 100}, {"SCAN", "PENDING", 0}, {"DELETE", "PENDING", 0}},
			[]string{StatusRunning, StatusRetryable, StatusPending}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := OpenRaw(filepath.Join(t.TempDir(), "library.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			mustExec(t, s.DB, legacySchema)
			for _, q := range c.legacy {
				mustExec(t, s.DB, q)
			}
			for _, j := range c.jobs {
				mustExec(t, s.DB, `INSERT INTO jobs(kind, status, worker_id, worker_heartbeat_at, lease_expires_at) VALUES (?, ?, 'w', ?, ?)`,
					j.kind, j.status, j.heartbeat, j.heartbeat+1000)
			}
			ctx := context.Background()
			if err := Migrate(ctx, s.DB); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			active := 0
			for i, want := range c.want {
				var kind, status string
				var code, worker *string
				if err := s.DB.QueryRow(`SELECT kind, status, error_code, worker_id FROM jobs WHERE id = ?`, i+1).
					Scan(&kind, &status, &code, &worker); err != nil {
					t.Fatal(err)
				}
				if status != want {
					t.Errorf("job %d (%s) status %q, want %q", i+1, kind, status, want)
				}
				if kind == KindScan || kind == KindHash {
					if status == StatusPending || status == StatusRunning {
						active++
					}
					demoted := status == StatusRetryable
					if demoted && (code == nil || *code != ErrCodeMigrationDuplicateActive || worker != nil) {
						t.Errorf("job %d demoted with code %v, worker %v", i+1, code, worker)
					}
				}
			}
			if active > 1 {
				t.Fatalf("%d active scan/hash rows after migration", active)
			}
			var ddl string
			if err := s.DB.QueryRow(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'ix_jobs_single_active_scan_hash'`).Scan(&ddl); err != nil {
				t.Fatal(err)
			}
			if want := `WHERE lower(status) IN ('pending', 'running') AND lower(kind) IN ('scan', 'hash')`; !containsFold(ddl, want) {
				t.Fatalf("index rebuilt as %q, want the §5 predicate %q", ddl, want)
			}
		})
	}
}

// TestMigration0011NormalisesHashColumns: a legacy library_files row with
// an uppercase algorithm (the enum name) and uppercase hex is lowercased
// (§2) before the group index and triggers are built, so it groups with the
// lowercase rows and its group key parses.
func TestMigration0011NormalisesHashColumns(t *testing.T) {
	s, err := OpenRaw(filepath.Join(t.TempDir(), "library.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mustExec(t, s.DB, legacySchema)
	mustExec(t, s.DB, `ALTER TABLE library_files ADD COLUMN hash_algorithm TEXT`)
	mustExec(t, s.DB, `ALTER TABLE library_files ADD COLUMN content_hash TEXT`)
	mustExec(t, s.DB, `ALTER TABLE library_files ADD COLUMN needs_hash INTEGER NOT NULL DEFAULT 0`)
	h := hexOf(7)
	upper := ""
	for _, r := range h {
		if r >= 'a' && r <= 'f' {
			r -= 'a' - 'A'
		}
		upper += string(r)
	}
	mustExec(t, s.DB, `INSERT INTO library_files(path, size_bytes, hash_algorithm, content_hash) VALUES
  ('/lib/a', 10, 'SHA256', ?), ('/lib/b', 10, 'sha256', ?)`, upper, h)
	ctx := context.Background()
	if err := Migrate(ctx, s.DB); err != nil {
		t.Fatal(err)
	}
	k, err := ParseGroupKey(AlgoSHA256 + ":" + h)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.GroupSize(ctx, k); err != nil || n != 2 {
		t.Fatalf("group size %d (%v), want both rows in one group", n, err)
	}
	groups, _, err := s.ListGroups(ctx, nil, 10)
	if err != nil || len(groups) != 1 || groups[0].GroupKey != k.String() || groups[0].FileCount != 2 {
		t.Fatalf("groups %+v (%v)", groups, err)
	}
}

func containsFold(s, sub string) bool {
	norm := func(v string) string {
		out := make([]rune, 0, len(v))
		space := false
		for _, r := range v {
			if r == ' ' || r == '\n' || r == '\t' {
				if !space {
					out = append(out, ' ')
				}
				space = true
				continue
			}
			space = false
			out = append(out, r)
		}
		return string(out)
	}
	a, b := norm(s), norm(sub)
	for i := 0; i+len(b) <= len(a); i++ {
		if a[i:i+len(b)] == b {
			return true
		}
	}
	return false
}
