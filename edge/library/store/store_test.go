package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func openTest(t testing.TB) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "library.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustExec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func TestLegalValuesEnforced(t *testing.T) {
	s := openTest(t)
	cases := []struct {
		name string
		q    string
		ok   bool
	}{
		{"lowercase job", `INSERT INTO jobs(kind,status) VALUES ('scan','completed')`, true},
		{"uppercase status", `INSERT INTO jobs(kind,status) VALUES ('scan','PENDING')`, false},
		{"unknown kind", `INSERT INTO jobs(kind,status) VALUES ('transcode','completed')`, false},
		{"scan session", `INSERT INTO scan_sessions(status) VALUES ('succeeded')`, true},
		{"scan session bad", `INSERT INTO scan_sessions(status) VALUES ('completed')`, false},
		{"hash algo", `INSERT INTO library_files(path, hash_algorithm) VALUES ('/a','md5')`, false},
		{"thumb format", `INSERT INTO thumbnails(format) VALUES ('png')`, false},
		{"thumb media", `INSERT INTO thumbnails(media_type) VALUES ('audio')`, false},
		{"cleanup status", `INSERT INTO thumbnail_cleanup_jobs(status) VALUES ('retryable')`, false},
		{"wal mode", `INSERT INTO wal_maintenance_jobs(requested_mode) VALUES ('full')`, false},
		{"wal ok", `INSERT INTO wal_maintenance_jobs(requested_mode, status) VALUES ('truncate','retryable')`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.DB.Exec(c.q)
			if (err == nil) != c.ok {
				t.Fatalf("ok=%v, err=%v", c.ok, err)
			}
		})
	}
	mustExec(t, s.DB, `INSERT INTO jobs(kind,status) VALUES ('hash','failed')`)
	if _, err := s.DB.Exec(`UPDATE jobs SET status = 'Done' WHERE kind = 'hash'`); err == nil {
		t.Fatal("update to an illegal status accepted")
	}
}

func TestSingleActiveIndexConcurrent(t *testing.T) {
	s := openTest(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			kind := []string{"scan", "hash"}[i%2]
			_, err := s.DB.Exec(`INSERT INTO jobs(kind,status,created_at,updated_at) VALUES (?, 'pending', 1, 1)`, kind)
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			} else if !strings.Contains(err.Error(), "UNIQUE") {
				t.Errorf("unexpected error: %v", err)
			}
		}(i)
	}
	wg.Wait()
	if ok != 1 {
		t.Fatalf("%d active scan/hash rows admitted, want 1", ok)
	}
}

// legacySchema is a pre-protocol database: uppercase enums, no legal-value
// triggers, no single-active index, library_files lacking the dedup columns.
const legacySchema = `
CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, status TEXT NOT NULL,
  worker_id TEXT, worker_heartbeat_at INTEGER, lease_expires_at INTEGER, created_at INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL DEFAULT 0);
CREATE TABLE scan_sessions (id INTEGER PRIMARY KEY AUTOINCREMENT, status TEXT NOT NULL, started_at INTEGER NOT NULL DEFAULT 0);
CREATE TABLE library_files (id INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT NOT NULL UNIQUE, size_bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE thumbnails (id INTEGER PRIMARY KEY AUTOINCREMENT, status TEXT NOT NULL, media_type TEXT, format TEXT);
`

func legacyDB(t *testing.T, withVersions bool) *Store {
	t.Helper()
	s, err := OpenRaw(filepath.Join(t.TempDir(), "library.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	mustExec(t, s.DB, legacySchema)
	rows := []struct {
		kind, status string
		hb           int64
	}{
		{"SCAN", "RUNNING", 100}, // 1
		{"HASH", "RUNNING", 300}, // 2: latest heartbeat → winner
		{"SCAN", "PENDING", 0},   // 3
		{"HASH", "COMPLETED", 0}, // 4
		{"Scan", "Pending", 0},   // 5
		{"DELETE", "PENDING", 0}, // 6: not scan/hash, untouched
	}
	for _, r := range rows {
		mustExec(t, s.DB, `INSERT INTO jobs(kind,status,worker_id,worker_heartbeat_at,lease_expires_at) VALUES (?,?,?,?,?)`,
			r.kind, r.status, "w", r.hb, r.hb+1000)
	}
	mustExec(t, s.DB, `INSERT INTO scan_sessions(status) VALUES ('SUCCEEDED')`)
	mustExec(t, s.DB, `INSERT INTO library_files(path, size_bytes) VALUES ('/lib/a', 10), ('/lib/b', 20)`)
	mustExec(t, s.DB, `INSERT INTO thumbnails(status, media_type, format) VALUES ('READY','IMAGE','JPEG')`)
	if withVersions {
		mustExec(t, s.DB, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`)
		for _, m := range Migrations[:4] {
			mustExec(t, s.DB, `INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.Version, m.Name)
		}
	}
	return s
}

func TestMigrateLegacyDatabase(t *testing.T) {
	for _, withVersions := range []bool{false, true} {
		t.Run(fmt.Sprintf("versioned=%v", withVersions), func(t *testing.T) {
			s := legacyDB(t, withVersions)
			ctx := context.Background()
			if err := Migrate(ctx, s.DB); err != nil {
				t.Fatal(err)
			}
			got := map[int64][2]string{}
			rows, err := s.DB.Query(`SELECT id, kind, status FROM jobs`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id int64
				var k, st string
				rows.Scan(&id, &k, &st)
				got[id] = [2]string{k, st}
			}
			rows.Close()
			want := map[int64][2]string{
				1: {"scan", "retryable"}, 2: {"hash", "running"}, 3: {"scan", "retryable"},
				4: {"hash", "completed"}, 5: {"scan", "retryable"}, 6: {"delete", "pending"},
			}
			for id, w := range want {
				if got[id] != w {
					t.Errorf("job %d = %v, want %v", id, got[id], w)
				}
			}
			var code string
			var worker sql.NullString
			if err := s.DB.QueryRow(`SELECT error_code, worker_id FROM jobs WHERE id = 1`).Scan(&code, &worker); err != nil {
				t.Fatal(err)
			}
			if code != ErrCodeMigrationDuplicateActive || worker.Valid {
				t.Errorf("demoted job: code=%q worker=%v", code, worker)
			}
			var idx int
			s.DB.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE name IN ('ix_jobs_single_active_scan_hash','ix_library_files_dedup_group')`).Scan(&idx)
			if idx != 2 {
				t.Fatalf("indexes present: %d, want 2", idx)
			}
			if _, err := s.DB.Exec(`INSERT INTO jobs(kind,status) VALUES ('scan','pending')`); err == nil {
				t.Fatal("second active scan accepted after migration")
			}
			var ts, media, format string
			s.DB.QueryRow(`SELECT status, media_type, format FROM thumbnails`).Scan(&ts, &media, &format)
			if ts != "ready" || media != "image" || format != "jpeg" {
				t.Fatalf("thumbnail enums not normalised: %s %s %s", ts, media, format)
			}
			cols, _ := TableColumns(ctx, s.DB, "library_files")
			for _, c := range []string{"is_missing", "needs_hash", "hash_algorithm", "content_hash"} {
				if !cols[c] {
					t.Errorf("library_files.%s not backfilled", c)
				}
			}
			v, _ := AppliedVersions(ctx, s.DB)
			if len(v) != len(Migrations) || v[len(v)-1] != Migrations[len(Migrations)-1].Version {
				t.Fatalf("versions %v", v)
			}
			// Idempotent on a second run.
			if err := Migrate(ctx, s.DB); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A database at version 10 whose library_files lacks the dedup columns:
// 0011 must add them before it builds the index and records its version.
func TestMigration0011BackfillsColumnsBeforeIndex(t *testing.T) {
	s := legacyDB(t, true)
	ctx := context.Background()
	for _, m := range Migrations {
		if m.Version == 11 {
			break
		}
		if m.Version <= 4 {
			continue
		}
		if err := sqldb.InTx(ctx, s.DB, func(tx *sql.Tx) error {
			if err := m.Up(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(`INSERT INTO schema_migrations VALUES (?, ?, 0)`, m.Version, m.Name)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	cols, _ := TableColumns(ctx, s.DB, "library_files")
	if cols["content_hash"] {
		t.Fatal("fixture already has content_hash")
	}
	if err := Migrate(ctx, s.DB); err != nil {
		t.Fatal(err)
	}
	var n int
	s.DB.QueryRow(`SELECT COUNT(*) FROM library_files WHERE is_missing = 0 AND needs_hash = 1`).Scan(&n)
	if n != 2 {
		t.Fatalf("backfilled defaults: %d rows with is_missing=0, needs_hash=1; want 2", n)
	}
}

// A failing 0011 records no version and leaves no index behind.
func TestMigrationFailureRecordsNoVersion(t *testing.T) {
	s := legacyDB(t, false)
	ctx := context.Background()
	// A view named like the index makes CREATE INDEX fail.
	mustExec(t, s.DB, `CREATE VIEW ix_library_files_dedup_group AS SELECT 1`)
	if err := Migrate(ctx, s.DB); err == nil {
		t.Fatal("migration succeeded despite the conflict")
	}
	v, _ := AppliedVersions(ctx, s.DB)
	for _, x := range v {
		if x == 11 {
			t.Fatal("0011 recorded although it failed")
		}
	}
	cols, _ := TableColumns(ctx, s.DB, "library_files")
	if cols["content_hash"] {
		t.Fatal("0011's column backfill was not rolled back")
	}
}

// A database at version 11 gets the source identity columns from 0012; its
// rows are kept, their new columns NULL.
func TestMigration0012AddsSourceIdentity(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	// Back to the version 11 shape.
	for _, q := range []string{
		`ALTER TABLE library_files DROP COLUMN ctime_ns`, `ALTER TABLE library_files DROP COLUMN dev`,
		`ALTER TABLE library_files DROP COLUMN inode`, `ALTER TABLE thumbnails DROP COLUMN source_size_bytes`,
		`ALTER TABLE thumbnails DROP COLUMN source_mtime_ns`, `ALTER TABLE thumbnails DROP COLUMN source_ctime_ns`,
		`DELETE FROM schema_migrations WHERE version = 12`,
		`INSERT INTO library_files(root, path, size_bytes, mtime_ns) VALUES ('/lib', '/lib/a', 10, 5)`,
		`INSERT INTO thumbnails(file_id, status, output_path) VALUES (1, 'ready', '/state/thumbs/1_320.jpg')`,
	} {
		mustExec(t, s.DB, q)
	}
	if err := Migrate(ctx, s.DB); err != nil {
		t.Fatal(err)
	}
	for table, cols := range map[string][]string{
		"library_files": {"ctime_ns", "dev", "inode"},
		"thumbnails":    {"source_size_bytes", "source_mtime_ns", "source_ctime_ns"},
	} {
		have, _ := TableColumns(ctx, s.DB, table)
		for _, c := range cols {
			if !have[c] {
				t.Errorf("%s.%s missing after 0012", table, c)
			}
		}
	}
	var n int
	s.DB.QueryRow(`SELECT COUNT(*) FROM library_files WHERE ctime_ns IS NULL AND dev IS NULL AND inode IS NULL AND size_bytes = 10`).Scan(&n)
	if n != 1 {
		t.Fatal("library_files row not kept with NULL identity")
	}
	s.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE source_size_bytes IS NULL AND status = 'ready'`).Scan(&n)
	if n != 1 {
		t.Fatal("thumbnail row not kept with a NULL source stamp")
	}
	if v, _ := AppliedVersions(ctx, s.DB); !slices.Contains(v, 12) {
		t.Fatalf("versions %v", v)
	}
}

// TestUpsertFilesDetectsRewrite: besides size and mtime, a scan that sees
// another ctime, device or inode makes the file need a hash again and takes
// it out of its group; an unrecorded identity (a row from before 0012, or a
// stat without one) is filled in without counting as a change.
func TestUpsertFilesDetectsRewrite(t *testing.T) {
	base := FileIdent{CtimeNS: 1000, Dev: 7, Inode: 42}
	with := func(f func(*FileIdent)) *FileIdent { id := base; f(&id); return &id }
	cases := []struct {
		name    string
		first   *FileIdent // identity of the first scan
		size    int64
		mtime   int64
		second  *FileIdent
		changed bool
	}{
		{"unchanged", &base, 10, 5, &base, false},
		{"size", &base, 11, 5, &base, true},
		{"mtime", &base, 10, 6, &base, true},
		{"rewritten in place, mtime restored: ctime", &base, 10, 5, with(func(i *FileIdent) { i.CtimeNS++ }), true},
		{"replaced by another file: inode", &base, 10, 5, with(func(i *FileIdent) { i.Inode = 43 }), true},
		{"other device", &base, 10, 5, with(func(i *FileIdent) { i.Dev = 8 }), true},
		{"row without identity gets one", nil, 10, 5, &base, false},
		{"stat without identity", &base, 10, 5, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			ctx := context.Background()
			sid, err := s.StartScanSession(ctx, 1, []string{"/lib"})
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.UpsertFiles(ctx, sid, []FileStat{{Root: "/lib", Path: "/lib/a", Size: 10, MtimeNS: 5, Ident: c.first}}); err != nil {
				t.Fatal(err)
			}
			mustExec(t, s.DB, `INSERT INTO library_files(root, path, size_bytes, mtime_ns) VALUES ('/lib', '/lib/b', 10, 5)`)
			for _, p := range []string{"/lib/a", "/lib/b"} {
				f, err := scanFile(s.DB.QueryRow(`SELECT `+FileColumns+` FROM library_files WHERE path = ?`, p))
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := s.RecordHash(ctx, f, AlgoBLAKE3, strings.Repeat("ab", 32)); !ok || err != nil {
					t.Fatalf("record hash of %s: %v %v", p, ok, err)
				}
			}
			if n, _ := s.GroupSize(ctx, GroupKey{Algorithm: AlgoBLAKE3, HashHex: strings.Repeat("ab", 32)}); n != 2 {
				t.Fatalf("group of %d before the rescan", n)
			}
			_, changed, err := s.UpsertFiles(ctx, sid, []FileStat{{Root: "/lib", Path: "/lib/a", Size: c.size, MtimeNS: c.mtime, Ident: c.second}})
			if err != nil {
				t.Fatal(err)
			}
			f, err := scanFile(s.DB.QueryRow(`SELECT ` + FileColumns + ` FROM library_files WHERE path = '/lib/a'`))
			if err != nil {
				t.Fatal(err)
			}
			if (changed == 1) != c.changed || f.NeedsHash != c.changed || (f.ContentHash == nil) != c.changed {
				t.Fatalf("changed=%d needs_hash=%v hash=%v, want changed=%v", changed, f.NeedsHash, f.ContentHash, c.changed)
			}
			want := 2
			if c.changed {
				want = 1 // only b is left
			}
			if n, _ := s.GroupSize(ctx, GroupKey{Algorithm: AlgoBLAKE3, HashHex: strings.Repeat("ab", 32)}); n != int64(want) {
				t.Fatalf("group of %d after the rescan, want %d", n, want)
			}
			// The identity last seen is kept for the next comparison.
			wantIdent := c.second
			if wantIdent == nil {
				wantIdent = c.first
			}
			if f.CtimeNS == nil || *f.CtimeNS != wantIdent.CtimeNS || *f.Dev != wantIdent.Dev || *f.Inode != wantIdent.Inode {
				t.Fatalf("recorded identity %v %v %v, want %+v", f.CtimeNS, f.Dev, f.Inode, *wantIdent)
			}
		})
	}
}
