package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRemoveStaleThumbTemps: a render killed by SIGKILL or a power loss
// leaves its .tmp-thumb-<digits> file in the thumbnails directory. Only
// such regular files, directly in that directory and older than any render
// can take, are removed: not a render in progress, not a symlink or hard
// link that happens to match (their targets are library files), not a
// directory, not a near miss of the name, not a file below a
// subdirectory, and nothing outside the directory.
func TestRemoveStaleThumbTemps(t *testing.T) {
	old := time.Now().Add(-48 * time.Hour)
	type made struct {
		path   string
		target string // a library file reached through the entry, kept byte-identical
	}
	cases := []struct {
		name    string
		make    func(e *env, thumbs string) made
		removed bool
	}{
		{"old temp file", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(thumbs, ".tmp-thumb-1234567"), old)}
		}, true},
		{"render in progress", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(thumbs, ".tmp-thumb-2345678"), time.Now())}
		}, false},
		{"half an hour old: within what a render may take", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(thumbs, ".tmp-thumb-3456789"), time.Now().Add(-30*time.Minute))}
		}, false},
		{"symlink named like a temp file, to a library file", func(e *env, thumbs string) made {
			target := e.write("song.flac", "music")
			link := filepath.Join(thumbs, ".tmp-thumb-4567890")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			lutimes(t, link, old)
			lutimes(t, target, old)
			return made{path: link, target: target}
		}, false},
		{"hard link named like a temp file, to a library file", func(e *env, thumbs string) made {
			target := e.write("movie.mkv", "film")
			lutimes(t, target, old)
			link := filepath.Join(thumbs, ".tmp-thumb-5678901")
			if err := os.Link(target, link); err != nil {
				t.Fatalf("hard link from the thumbnails directory to the library (both are test directories on one filesystem): %v", err)
			}
			return made{path: link, target: target}
		}, false},
		{"directory named like a temp file", func(e *env, thumbs string) made {
			d := filepath.Join(thumbs, ".tmp-thumb-6789012")
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			lutimes(t, d, old)
			return made{path: d}
		}, false},
		{"suffix after the digits", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(thumbs, ".tmp-thumb-123.jpg"), old)}
		}, false},
		{"letters instead of digits", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(thumbs, ".tmp-thumb-12ab"), old)}
		}, false},
		{"nothing after the prefix", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(thumbs, ".tmp-thumb-"), old)}
		}, false},
		{"prefix before the name", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(thumbs, "x.tmp-thumb-123"), old)}
		}, false},
		{"old thumbnail", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(thumbs, "7_320.jpg"), old)}
		}, false},
		{"temp file below a subdirectory", func(e *env, thumbs string) made {
			if err := os.Mkdir(filepath.Join(thumbs, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			return made{path: oldFile(t, filepath.Join(thumbs, "sub", ".tmp-thumb-789"), old)}
		}, false},
		{"temp-named file in a library root", func(e *env, thumbs string) made {
			return made{path: oldFile(t, filepath.Join(e.root, ".tmp-thumb-890"), old)}
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, false)
			thumbs := e.x.Thumbs.Path()
			m := c.make(e, thumbs)
			var before []byte
			if m.target != "" {
				before, _ = os.ReadFile(m.target)
			}
			n, err := e.x.RemoveStaleThumbTemps(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Lstat(m.path)
			if gone := os.IsNotExist(statErr); gone != c.removed || (n == 1) != c.removed {
				t.Fatalf("%s: removed=%v (count %d), want %v", m.path, gone, n, c.removed)
			}
			if m.target != "" {
				if after, err := os.ReadFile(m.target); err != nil || string(after) != string(before) {
					t.Fatalf("library file %s changed: %q %v", m.target, after, err)
				}
			}
		})
	}

	t.Run("thumbnails directory swapped for a symlink", func(t *testing.T) {
		e := newEnv(t, false)
		thumbs := e.x.Thumbs.Path()
		elsewhere := filepath.Join(e.root, "album")
		if err := os.Mkdir(elsewhere, 0o755); err != nil {
			t.Fatal(err)
		}
		victim := oldFile(t, filepath.Join(elsewhere, ".tmp-thumb-1"), old)
		if err := os.Rename(thumbs, thumbs+".moved"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, thumbs); err != nil {
			t.Fatal(err)
		}
		if n, err := e.x.RemoveStaleThumbTemps(context.Background()); err == nil || n != 0 {
			t.Fatalf("swept through a symlink: removed %d, err %v", n, err)
		}
		if _, err := os.Lstat(victim); err != nil {
			t.Fatalf("file reached through the symlink removed: %v", err)
		}
	})

	t.Run("Run sweeps at start", func(t *testing.T) {
		e := newEnv(t, false)
		stale := oldFile(t, filepath.Join(e.x.Thumbs.Path(), ".tmp-thumb-42"), old)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { e.x.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Lstat(stale); os.IsNotExist(err) {
				return
			}
		}
		t.Fatal("stale temp file still there after the executor started")
	})
}

func oldFile(t *testing.T, path string, mtime time.Time) string {
	t.Helper()
	if err := os.WriteFile(path, []byte("partial"), 0o640); err != nil {
		t.Fatal(err)
	}
	lutimes(t, path, mtime)
	return path
}

func lutimes(t *testing.T, path string, mtime time.Time) {
	t.Helper()
	tv := []unix.Timeval{unix.NsecToTimeval(mtime.UnixNano()), unix.NsecToTimeval(mtime.UnixNano())}
	if err := unix.Lutimes(path, tv); err != nil {
		t.Fatal(err)
	}
}
