package store

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestMarkMissingFilesOfRootsNoLongerConfigured: a root taken out of the
// configuration takes its files out of the library. Its files were never
// walked again, so without this they would stay live for ever: listed in
// duplicate groups next to files of the remaining roots, counted in
// file_count and total_size_bytes, and offered to delete requests and
// thumbnails though every path check refuses them. A root still configured
// but not walked this time (not mounted) keeps its files.
func TestMarkMissingFilesOfRootsNoLongerConfigured(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	cases := []struct {
		name    string
		roots   []string     // configured for the second scan
		walked  []WalkedRoot // what the second scan walked
		missing []string
		grouped int // files left in the group
	}{
		{"root removed", []string{"/lib"}, []WalkedRoot{{Root: "/lib"}}, []string{"/old/a"}, 2},
		{"root removed, remaining root not walked", []string{"/lib"}, nil, []string{"/old/a"}, 2},
		{"root kept but not walked", []string{"/lib", "/old"}, []WalkedRoot{{Root: "/lib"}}, nil, 3},
		{"root sharing a name prefix removed", []string{"/lib", "/old"}, []WalkedRoot{{Root: "/lib"}, {Root: "/old"}}, []string{"/libx/a"}, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			ctx := context.Background()
			job := insertJob(t, s, StatusRunning)
			first, err := s.StartScanSession(ctx, job, []string{"/lib", "/old", "/libx"})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range []FileStat{{Root: "/lib", Path: "/lib/a"}, {Root: "/lib", Path: "/lib/b"}, {Root: "/old", Path: "/old/a"}, {Root: "/libx", Path: "/libx/a"}} {
				f.Size, f.MtimeNS = 10, 1
				if _, _, err := s.UpsertFiles(ctx, first, []FileStat{f}); err != nil {
					t.Fatal(err)
				}
			}
			mustExec(t, s.DB, `UPDATE library_files SET hash_algorithm = 'blake3', content_hash = ?, needs_hash = 0`, digest)
			if err := s.FinishScanSession(ctx, first, StatusSucceeded, ScanCounts{}, ""); err != nil {
				t.Fatal(err)
			}
			// Only the last case keeps a file under /libx, a root whose
			// name /lib is a prefix of.
			if c.name != "root sharing a name prefix removed" {
				mustExec(t, s.DB, `DELETE FROM library_files WHERE root = '/libx'`)
			}

			sid, err := s.StartScanSession(ctx, job, c.roots)
			if err != nil {
				t.Fatal(err)
			}
			var seen []FileStat
			for _, p := range []string{"/lib/a", "/lib/b", "/old/a"} {
				root := p[:strings.LastIndex(p, "/")]
				if slices.ContainsFunc(c.walked, func(w WalkedRoot) bool { return w.Root == root }) {
					seen = append(seen, FileStat{Root: root, Path: p, Size: 10, MtimeNS: 1})
				}
			}
			if len(seen) > 0 {
				if _, _, err := s.UpsertFiles(ctx, sid, seen); err != nil {
					t.Fatal(err)
				}
			}
			m, err := s.MarkMissing(ctx, sid, c.walked)
			n := m.Marked
			if err != nil {
				t.Fatal(err)
			}
			got := missingPaths(t, s)
			if !slices.Equal(got, c.missing) || n != int64(len(c.missing)) {
				t.Fatalf("marked %d missing: %v, want %v", n, got, c.missing)
			}
			groups, _, err := s.ListGroups(ctx, nil, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(groups) != 1 || groups[0].FileCount != int64(c.grouped) || groups[0].TotalSizeBytes != int64(10*c.grouped) {
				t.Fatalf("groups %+v, want one of %d files", groups, c.grouped)
			}
			k, _ := ParseGroupKey(groups[0].GroupKey)
			files, _, _ := s.GroupFiles(ctx, k, 0, 10)
			for _, f := range files {
				if !slices.Contains(c.roots, f.Root) {
					t.Fatalf("group lists %s, outside the configured roots %v", f.Path, c.roots)
				}
			}
		})
	}
}
