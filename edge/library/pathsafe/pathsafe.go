package pathsafe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrOutside is matched with errors.Is for every refused path.
var ErrOutside = errors.New("path outside the allowed roots")

// Roots is the set of library roots, stored as real paths.
type Roots struct{ real []string }

// NewRoots resolves each root to its real path; every root must exist and
// be a directory.
func NewRoots(roots []string) (*Roots, error) {
	r := &Roots{}
	for _, p := range roots {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("library root %q is not absolute", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("library root %q: %w", p, err)
		}
		st, err := os.Stat(real)
		if err != nil {
			return nil, fmt.Errorf("library root %q: %w", p, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("library root %q is not a directory", p)
		}
		r.real = append(r.real, filepath.Clean(real))
	}
	return r, nil
}

// List returns the real root paths.
func (r *Roots) List() []string { return append([]string(nil), r.real...) }

// Under reports whether p (already real and clean) is dir or inside dir.
func Under(dir, p string) bool {
	if p == dir {
		return true
	}
	if dir == string(filepath.Separator) {
		return strings.HasPrefix(p, dir)
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// Resolve returns the real path of p and the root containing it, or an
// error wrapping ErrOutside when p escapes every root (through "..", an
// absolute symlink, or a relative one).
func (r *Roots) Resolve(p string) (real, root string, err error) {
	if !filepath.IsAbs(p) {
		return "", "", fmt.Errorf("%w: %q is not absolute", ErrOutside, p)
	}
	real, err = filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", "", err
	}
	for _, root := range r.real {
		if Under(root, real) {
			return real, root, nil
		}
	}
	return "", "", fmt.Errorf("%w: %q resolves outside every library root", ErrOutside, p)
}

// ResolveRel resolves rel, a relative path that must stay local, under root.
func (r *Roots) ResolveRel(root, rel string) (string, error) {
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: %q is not a local relative path", ErrOutside, rel)
	}
	real, _, err := r.Resolve(filepath.Join(root, rel))
	return real, err
}

// Open opens source file p for reading after Resolve, refusing a final
// symlink and re-checking after the open that the opened file is the one
// at the resolved path; it returns the file and its real path.
func (r *Roots) Open(p string) (*os.File, string, error) {
	real, _, err := r.Resolve(p)
	if err != nil {
		return nil, "", err
	}
	// O_NONBLOCK: a FIFO put where a file was would otherwise block the
	// open until some writer appears, holding the caller (and its lease)
	// for ever; sameFile then refuses anything but a regular file, on which
	// the flag changes nothing.
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", err
	}
	if err := sameFile(f, real); err != nil {
		f.Close()
		return nil, "", err
	}
	if again, _, err := r.Resolve(real); err != nil || again != real {
		f.Close()
		return nil, "", fmt.Errorf("%w: %q changed while opening", ErrOutside, p)
	}
	return f, real, nil
}

func sameFile(f *os.File, path string) error {
	a, err := f.Stat()
	if err != nil {
		return err
	}
	b, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !os.SameFile(a, b) {
		return fmt.Errorf("%w: %q was replaced while opening", ErrOutside, path)
	}
	if !a.Mode().IsRegular() {
		return fmt.Errorf("%q is not a regular file", path)
	}
	return nil
}

// Dir is a directory the library writes into (thumbnails, trash), held as
// its real path.
type Dir struct{ real string }

// NewDir creates dir (mode 0750) and resolves it.
func NewDir(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	return &Dir{real: filepath.Clean(real)}, nil
}

// Path is the real path of the directory.
func (d *Dir) Path() string { return d.real }

// Join returns dir/rel after checking rel is local.
func (d *Dir) Join(rel string) (string, error) {
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%w: %q is not a local relative path", ErrOutside, rel)
	}
	return filepath.Join(d.real, rel), nil
}

// Contains reports an error wrapping ErrOutside unless p, with symlinks in
// its directory resolved, lies strictly inside the directory and is not a
// symlink itself.
func (d *Dir) Contains(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%w: %q is not absolute", ErrOutside, p)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(filepath.Clean(p)))
	if err != nil {
		return err
	}
	full := filepath.Join(parent, filepath.Base(p))
	if full == d.real || !Under(d.real, full) {
		return fmt.Errorf("%w: %q is not inside %s", ErrOutside, p, d.real)
	}
	if st, err := os.Lstat(full); err == nil && st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%w: %q is a symlink", ErrOutside, p)
	}
	return nil
}
