package policy_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestOpenReadyServesOnlyTheCache: a ready row is served only from a
// regular file inside the thumbnails directory. A row naming a file
// elsewhere, a symlink in the cache (to a file outside it or to a cache
// file), a directory or a FIFO is refused without reading what it names;
// a cache file removed since admission is fs.ErrNotExist.
func TestOpenReadyServesOnlyTheCache(t *testing.T) {
	cases := []struct {
		name string
		// path creates what the row names and returns its path.
		path    func(t *testing.T, thumbs, outside string) string
		want    string // the bytes served
		wantErr error
	}{
		{"a cache file", func(t *testing.T, thumbs, _ string) string {
			return write(t, filepath.Join(thumbs, "1_320.jpg"), "picture")
		}, "picture", nil},
		{"a file outside the cache", func(t *testing.T, _, outside string) string {
			return write(t, filepath.Join(outside, "secret"), "secret")
		}, "", pathsafe.ErrOutside},
		{"a path climbing out of the cache", func(t *testing.T, thumbs, outside string) string {
			write(t, filepath.Join(outside, "secret"), "secret")
			rel, _ := filepath.Rel(thumbs, filepath.Join(outside, "secret"))
			return thumbs + string(filepath.Separator) + rel
		}, "", pathsafe.ErrOutside},
		{"a symlink in the cache to a file outside", func(t *testing.T, thumbs, outside string) string {
			return symlink(t, write(t, filepath.Join(outside, "secret"), "secret"), filepath.Join(thumbs, "1_320.jpg"))
		}, "", pathsafe.ErrOutside},
		{"a symlink in the cache to a cache file", func(t *testing.T, thumbs, _ string) string {
			return symlink(t, write(t, filepath.Join(thumbs, "2_320.jpg"), "other"), filepath.Join(thumbs, "1_320.jpg"))
		}, "", pathsafe.ErrOutside},
		{"a directory of the cache", func(t *testing.T, thumbs, _ string) string {
			d := filepath.Join(thumbs, "1_320.jpg")
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			return d
		}, "", pathsafe.ErrOutside},
		{"a FIFO in the cache", func(t *testing.T, thumbs, _ string) string {
			p := filepath.Join(thumbs, "1_320.jpg")
			if err := mkfifo(p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "", pathsafe.ErrOutside},
		{"a cache file removed since admission", func(_ *testing.T, thumbs, _ string) string {
			return filepath.Join(thumbs, "1_320.jpg")
		}, "", fs.ErrNotExist},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			if err := os.MkdirAll(e.p.ThumbsDir, 0o750); err != nil {
				t.Fatal(err)
			}
			outside := t.TempDir()
			f, err := e.p.OpenReady(policy.Thumb{Status: store.StatusReady, OutputPath: c.path(t, e.p.ThumbsDir, outside)})
			if c.wantErr != nil {
				if f != nil {
					f.Close()
				}
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if b, _ := io.ReadAll(f); string(b) != c.want {
				t.Fatalf("served %q, want %q", b, c.want)
			}
		})
	}
}

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func symlink(t *testing.T, target, link string) string {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return link
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
