package pathsafe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestResolveRefusesEscapes(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "lib")
	out := filepath.Join(base, "out")
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(root, "sub", "ok.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(out, "secret"), []byte("x"), 0o644)
	os.Symlink(filepath.Join(out, "secret"), filepath.Join(root, "abs-link"))
	os.Symlink("../out/secret", filepath.Join(root, "rel-link"))
	os.Symlink(out, filepath.Join(root, "dir-link"))
	os.Symlink(filepath.Join(root, "sub", "ok.txt"), filepath.Join(root, "inside-link"))
	os.WriteFile(filepath.Join(base, "libsibling"), []byte("x"), 0o644)
	r, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path    string
		outside bool
	}{
		{filepath.Join(root, "sub", "ok.txt"), false},
		{filepath.Join(root, "inside-link"), false},
		{filepath.Join(root, "abs-link"), true},
		{filepath.Join(root, "rel-link"), true},
		{filepath.Join(root, "dir-link", "secret"), true},
		{filepath.Join(root, "..", "out", "secret"), true},
		{root + "sibling", true},
		{"relative/path", true},
	}
	for _, c := range cases {
		_, _, err := r.Resolve(c.path)
		if got := errors.Is(err, ErrOutside); got != c.outside {
			t.Errorf("Resolve(%s): err=%v, outside=%v want %v", c.path, err, got, c.outside)
		}
		if c.outside {
			if f, _, err := r.Open(c.path); err == nil {
				f.Close()
				t.Errorf("Open(%s) succeeded", c.path)
			}
		}
	}
	if _, err := r.ResolveRel(root, "../out/secret"); !errors.Is(err, ErrOutside) {
		t.Errorf("ResolveRel escaped: %v", err)
	}
}

func TestDirContains(t *testing.T) {
	base := t.TempDir()
	d, err := NewDir(filepath.Join(base, "thumbs"))
	if err != nil {
		t.Fatal(err)
	}
	os.Symlink(base, filepath.Join(d.Path(), "up"))
	for _, c := range []struct {
		p  string
		ok bool
	}{
		{filepath.Join(d.Path(), "1_320.jpg"), true},
		{d.Path(), false},
		{filepath.Join(base, "x.jpg"), false},
		{filepath.Join(d.Path(), "up", "x.jpg"), false},
		{filepath.Join(d.Path(), "up"), false},
	} {
		if err := d.Contains(c.p); (err == nil) != c.ok {
			t.Errorf("Contains(%s) = %v", c.p, err)
		}
	}
	if _, err := d.Join("../x"); err == nil {
		t.Error("Join escaped")
	}
}

// TestOpenRefusesSpecialFiles opens, at a path inside a root, each kind of
// entry a catalogued file can be replaced by. A FIFO must be refused at
// once: opening it for reading would wait for a writer that never comes,
// holding a hash or thumbnail worker (and its lease) for ever.
func TestOpenRefusesSpecialFiles(t *testing.T) {
	root := t.TempDir()
	r, err := NewRoots([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		make   func(p string) error
		wantOK bool
	}{
		{"regular file", func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) }, true},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, false},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(root, strings.ReplaceAll(c.name, " ", "-"))
			if err := c.make(p); err != nil {
				t.Fatal(err)
			}
			type result struct {
				f   *os.File
				err error
			}
			done := make(chan result, 1)
			go func() {
				f, _, err := r.Open(p)
				done <- result{f, err}
			}()
			var res result
			select {
			case res = <-done:
			case <-time.After(3 * time.Second):
				// Let the blocked open return so the test can end.
				if w, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				<-done
				t.Fatalf("Open(%s) blocked", c.name)
			}
			if res.f != nil {
				res.f.Close()
			}
			if (res.err == nil) != c.wantOK {
				t.Fatalf("Open(%s) err = %v, want ok=%v", c.name, res.err, c.wantOK)
			}
			if res.err != nil && len(res.err.Error()) > 512 {
				t.Fatalf("error longer than 512 characters: %d", len(res.err.Error()))
			}
		})
	}
}

// TestNewRootsRefusesOverlap: a root inside another (or the same directory
// twice, under any spelling or through a symlink) would have its files
// walked, counted and catalogued once per root, their root changing with
// every scan; such a configuration is refused, naming both roots. Roots
// that only share a prefix of their names are distinct.
func TestNewRootsRefusesOverlap(t *testing.T) {
	base := t.TempDir()
	for _, d := range []string{"a/b/c", "ab", "other"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink(filepath.Join(base, "a"), filepath.Join(base, "link-to-a"))
	os.Symlink(filepath.Join(base, "a", "b"), filepath.Join(base, "link-to-b"))
	p := func(rel string) string { return filepath.Join(base, rel) }
	cases := []struct {
		name  string
		roots []string
		ok    bool
	}{
		{"disjoint", []string{p("a"), p("other")}, true},
		{"sharing a name prefix", []string{p("a"), p("ab")}, true},
		{"nested", []string{p("a"), p("a/b")}, false},
		{"nested, inner first", []string{p("a/b"), p("a")}, false},
		{"nested two levels", []string{p("other"), p("a/b/c"), p("a")}, false},
		{"the same root twice", []string{p("a"), p("a")}, false},
		{"the same root spelled differently", []string{p("a"), p("a/b/..") + "/"}, false},
		{"a symlink to another root", []string{p("a"), p("link-to-a")}, false},
		{"a symlink into another root", []string{p("link-to-b"), p("a")}, false},
		{"the filesystem root and any other", []string{"/", p("other")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := NewRoots(c.roots)
			if c.ok {
				if err != nil {
					t.Fatalf("refused %v: %v", c.roots, err)
				}
				if len(r.List()) != len(c.roots) {
					t.Fatalf("roots %v from %v", r.List(), c.roots)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted overlapping roots %v as %v", c.roots, r.List())
			}
			if !strings.Contains(err.Error(), "overlap") {
				t.Fatalf("error %q does not say the roots overlap", err)
			}
		})
	}
}

// TestRealPath: the path a directory will really have once created, with
// symlinks resolved before a ".." that follows them, and nothing created.
func TestRealPath(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(base, "state"), 0o755)
	os.MkdirAll(filepath.Join(base, "lib", "deep", "er"), 0o755)
	os.Symlink(filepath.Join(base, "lib", "deep", "er"), filepath.Join(base, "state", "link"))
	os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(base, "state", "dangling"))
	os.WriteFile(filepath.Join(base, "state", "file"), nil, 0o644)
	cases := []struct {
		path, want string // want "" = an error
	}{
		{base + "/state/trash", base + "/state/trash"},
		{base + "/state/link/trash", base + "/lib/deep/er/trash"},
		{base + "/state/link/../trash", base + "/lib/deep/trash"},
		{base + "/state/missing/../trash", base + "/state/trash"},
		{base + "//state/./trash/", base + "/state/trash"},
		{base + "/state/dangling/trash", ""},
		{base + "/state/file/trash", ""},
		{"state/trash", ""},
	}
	for _, c := range cases {
		got, err := RealPath(c.path)
		if c.want == "" {
			if err == nil {
				t.Errorf("RealPath(%q) = %q, want an error", c.path, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("RealPath(%q) = %q, %v; want %q", c.path, got, err, c.want)
		}
	}
	for _, p := range []string{"state/trash", "state/missing", "lib/deep/er/trash", "lib/deep/trash"} {
		if _, err := os.Lstat(filepath.Join(base, p)); err == nil {
			t.Errorf("%s created", p)
		}
	}
}

// TestDirEnsure: a directory removed while the library runs is created
// again where it was opened, mode 0750; a symlink or a file standing in its
// place, or a symlink put on its way, is refused and left as it is, and
// nothing is created where it leads.
func TestDirEnsure(t *testing.T) {
	cases := []struct {
		name string
		// prepare changes the opened directory dir; elsewhere is a
		// directory outside it.
		prepare func(t *testing.T, dir, elsewhere string)
		ok      bool
	}{
		{"still there", func(t *testing.T, dir, elsewhere string) {}, true},
		{"removed", func(t *testing.T, dir, elsewhere string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"replaced by a symlink", func(t *testing.T, dir, elsewhere string) {
			os.RemoveAll(dir)
			if err := os.Symlink(elsewhere, dir); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"replaced by a dangling symlink", func(t *testing.T, dir, elsewhere string) {
			os.RemoveAll(dir)
			if err := os.Symlink(filepath.Join(elsewhere, "new"), dir); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"replaced by a file", func(t *testing.T, dir, elsewhere string) {
			os.RemoveAll(dir)
			if err := os.WriteFile(dir, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"parent replaced by a symlink", func(t *testing.T, dir, elsewhere string) {
			parent := filepath.Dir(dir)
			os.RemoveAll(parent)
			if err := os.Symlink(elsewhere, parent); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			elsewhere := filepath.Join(base, "elsewhere")
			if err := os.Mkdir(elsewhere, 0o755); err != nil {
				t.Fatal(err)
			}
			d, err := NewDir(filepath.Join(base, "state", "thumbs"))
			if err != nil {
				t.Fatal(err)
			}
			c.prepare(t, d.Path(), elsewhere)
			err = d.Ensure()
			if !c.ok {
				if err == nil {
					t.Fatal("Ensure accepted the changed directory")
				}
				if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
					t.Fatalf("Ensure created %v where the change leads", entries)
				}
				return
			}
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			st, err := os.Lstat(d.Path())
			if err != nil || !st.IsDir() {
				t.Fatalf("directory not there after Ensure: %v", err)
			}
			if st.Mode().Perm()&^0o750 != 0 {
				t.Fatalf("recreated with mode %v", st.Mode().Perm())
			}
		})
	}
}
