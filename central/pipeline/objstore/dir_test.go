package objstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A write that never finished leaves a temporary file; the next Put in its
// directory removes those older than TmpMaxAge and nothing else: not a
// recent one (a write in progress), not an object, not a symlink.
func TestDirSweepsStaleTemporaryFiles(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "reports")}
	dir := filepath.Join(d.Path, "edge_daily", "e1")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-TmpMaxAge - time.Hour)
	cases := []struct {
		name    string
		age     time.Time
		symlink bool
		kept    bool
	}{
		{".tmp-0123456789abcdef", old, false, false},
		{".tmp-fedcba9876543210", time.Now().Add(-time.Minute), false, true},
		{"2025-01-01.json", old, false, true},
		{".tmp-link", old, true, true},
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.name)
		if c.symlink {
			if err := os.Symlink(outside, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte("partial"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, c.age, c.age); err != nil {
			t.Fatal(err)
		}
	}
	if _, written, err := d.Put(context.Background(), "edge_daily/e1/2026-01-02.json", []byte(`{"a":1}`), ""); err != nil || !written {
		t.Fatalf("written %v, err %v", written, err)
	}
	for _, c := range cases {
		_, err := os.Lstat(filepath.Join(dir, c.name))
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: kept %v, want %v (%v)", c.name, kept, c.kept, err)
		}
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
		t.Fatalf("symlink target: %q %v", b, err)
	}
}

// A Put syncs the directory it renamed the object into, after the rename,
// and every directory above it, up to the parent of a store directory it
// made; one that finds its bytes already there syncs them and their
// directories too, since the Put that renamed them may have failed before
// they were durable. The syncs are seen through syncFile; that they reach
// the disk is the kernel's part.
func TestDirPutSyncsDirectories(t *testing.T) {
	const key = "edge_daily/e1/2026-01-02.json"
	tmp := t.TempDir()
	d := Dir{Path: filepath.Join(tmp, "state", "reports")}
	obj := filepath.Join(d.Path, key)
	type synced struct {
		info      os.FileInfo
		objExists bool
	}
	var got []synced
	syncFile = func(f *os.File) error {
		info, err := f.Stat()
		if err != nil {
			return err
		}
		_, oerr := os.Stat(obj)
		got = append(got, synced{info, oerr == nil})
		return f.Sync()
	}
	t.Cleanup(func() { syncFile = (*os.File).Sync })
	// find reports whether path was synced, and whether the object was in
	// place when it was.
	find := func(path string) (bool, bool) {
		want, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range got {
			if os.SameFile(s.info, want) {
				return true, s.objExists
			}
		}
		return false, false
	}
	cases := []struct {
		name   string
		body   string
		synced []string // relative to tmp
	}{
		{"new object in new directories", `{"a":1}`, []string{".", "state", "state/reports", "state/reports/edge_daily", "state/reports/edge_daily/e1"}},
		{"same bytes found", `{"a":1}`, []string{"state/reports", "state/reports/edge_daily", "state/reports/edge_daily/e1", "state/reports/" + key}},
		{"replaced object", `{"a":2}`, []string{"state/reports", "state/reports/edge_daily", "state/reports/edge_daily/e1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got = nil
			if _, _, err := d.Put(context.Background(), key, []byte(c.body), ""); err != nil {
				t.Fatal(err)
			}
			for _, rel := range c.synced {
				ok, objThere := find(filepath.Join(tmp, rel))
				if !ok {
					t.Errorf("%s not synced", rel)
				} else if rel == "state/reports/edge_daily/e1" && !objThere {
					t.Errorf("%s synced before the object was renamed into it", rel)
				}
			}
		})
	}
}
