package pathsafe

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
