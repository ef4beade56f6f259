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
