package store

import (
	"context"
	"database/sql"
	"slices"
	"testing"
)

// TestOffDevice: a file not seen is kept only when the nearest walked
// directory above it is empty and on another device than the file was
// catalogued on; a non-empty nearest directory, the same device or no
// recorded device leaves it to be marked missing.
func TestOffDevice(t *testing.T) {
	const root, disk = 1, 2
	dev := func(d int64) sql.NullInt64 { return sql.NullInt64{Int64: d, Valid: true} }
	cases := []struct {
		name  string
		empty map[string]int64
		path  string
		dev   sql.NullInt64
		dir   string
		off   bool
	}{
		{"no empty directory", nil, "/lib/disk2/a", dev(disk), "", false},
		{"mount point empty, on the root's device", map[string]int64{"/lib/disk2": root}, "/lib/disk2/a", dev(disk), "/lib/disk2", true},
		{"deeper file, its directory gone", map[string]int64{"/lib/disk2": root}, "/lib/disk2/album/cd1/a", dev(disk), "/lib/disk2", true},
		{"empty directory on the file's device: deleted", map[string]int64{"/lib/disk2": disk}, "/lib/disk2/a", dev(disk), "/lib/disk2", false},
		{"nearest walked directory holds files", map[string]int64{"/lib/disk2/other": root}, "/lib/disk2/a", dev(disk), "", false},
		{"empty sibling only", map[string]int64{"/lib/disk3": root}, "/lib/disk2/a", dev(disk), "", false},
		{"name prefix of an empty directory", map[string]int64{"/lib/disk": root}, "/lib/disk2/a", dev(disk), "", false},
		{"no recorded device", map[string]int64{"/lib/disk2": root}, "/lib/disk2/a", sql.NullInt64{}, "", false},
		{"nested empty directories: the nearest decides", map[string]int64{"/lib/disk2": root, "/lib/disk2/sub": disk}, "/lib/disk2/sub/a", dev(disk), "/lib/disk2/sub", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, off := offDevice(c.empty, c.path, c.dev)
			if off != c.off || (off && dir != c.dir) {
				t.Fatalf("offDevice = %q, %v; want %q, %v", dir, off, c.dir, c.off)
			}
		})
	}
}

// TestMarkMissingKeepsUnmountedFiles: files under an empty directory that
// now sits on another device than they were catalogued on keep their state
// and are counted per directory; a file deleted elsewhere, one whose empty
// directory is on its own device, and one last seen longer than
// UnmountedGrace ago are marked missing.
func TestMarkMissingKeepsUnmountedFiles(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	job := insertJob(t, s, StatusRunning)
	first, _ := s.StartScanSession(ctx, job, []string{"/lib"})
	files := []FileStat{
		{Path: "/lib/seen", Ident: &FileIdent{Dev: 1}},
		{Path: "/lib/gone", Ident: &FileIdent{Dev: 1}},
		{Path: "/lib/disk2/a", Ident: &FileIdent{Dev: 2}},
		{Path: "/lib/disk2/sub/b", Ident: &FileIdent{Dev: 2}},
		{Path: "/lib/emptied/c", Ident: &FileIdent{Dev: 1}},
		{Path: "/lib/old/d"}, // catalogued without a device
		{Path: "/lib/disk3/e", Ident: &FileIdent{Dev: 3}},
	}
	for i := range files {
		files[i].Root, files[i].Size, files[i].MtimeNS = "/lib", 1, 1
	}
	if _, _, err := s.UpsertFiles(ctx, first, files); err != nil {
		t.Fatal(err)
	}
	s.FinishScanSession(ctx, first, StatusSucceeded, ScanCounts{}, "")
	// disk3 was last seen longer than UnmountedGrace ago: no longer kept.
	res, err := s.DB.Exec(`INSERT INTO scan_sessions(job_id, roots, status, started_at) VALUES (?, '[]', ?, ?)`,
		job, StatusSucceeded, s.NowMS()-UnmountedGrace.Milliseconds()-1)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := res.LastInsertId()
	if _, err := s.DB.Exec(`UPDATE library_files SET last_seen_scan_id = ? WHERE path = '/lib/disk3/e'`, old); err != nil {
		t.Fatal(err)
	}
	sid, _ := s.StartScanSession(ctx, job, []string{"/lib"})
	if _, _, err := s.UpsertFiles(ctx, sid, files[:1]); err != nil {
		t.Fatal(err)
	}
	m, err := s.MarkMissing(ctx, sid, []WalkedRoot{{Root: "/lib",
		Empty: map[string]int64{"/lib/disk2": 1, "/lib/disk3": 1, "/lib/emptied": 1, "/lib/old": 1}}})
	if err != nil {
		t.Fatal(err)
	}
	got := missingPaths(t, s)
	want := []string{"/lib/disk3/e", "/lib/emptied/c", "/lib/gone", "/lib/old/d"}
	if !slices.Equal(got, want) || m.Marked != 4 || len(m.Unmounted) != 1 || m.Unmounted["/lib/disk2"] != 2 {
		t.Fatalf("marked %d %v, kept %v; want %v, kept /lib/disk2: 2", m.Marked, got, m.Unmounted, want)
	}
}

// missingPaths lists the paths of the files marked missing, in order.
func missingPaths(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.DB.Query(`SELECT path FROM library_files WHERE is_missing = 1 ORDER BY path`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}
