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
// be a directory, and no root may be another or lie inside another (after
// resolving symlinks): a scan walks every root, so the files of a nested
// one would be seen twice, counted twice and catalogued under whichever
// root was walked last.
func NewRoots(roots []string) (*Roots, error) {
	r := &Roots{}
	var given []string
	for _, p := range roots {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("library root %q is not absolute", p)
		}
		// Resolved as written: the kernel walks a symlink before a ".."
		// that follows it, which filepath.Clean would remove with the
		// symlink's name. The cleaned form is only shown.
		real, err := filepath.EvalSymlinks(p)
		p = filepath.Clean(p)
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
		real = filepath.Clean(real)
		for i, other := range r.real {
			switch {
			case real == other:
				return nil, fmt.Errorf("library roots overlap: %q and %q are the same directory %s", given[i], p, real)
			case Under(other, real):
				return nil, fmt.Errorf("library roots overlap: %q (%s) is inside %q (%s)", p, real, given[i], other)
			case Under(real, other):
				return nil, fmt.Errorf("library roots overlap: %q (%s) is inside %q (%s)", given[i], other, p, real)
			}
		}
		r.real = append(r.real, real)
		given = append(given, p)
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

// RealPath returns the real path absolute path p will have once its
// missing directories are created, without creating anything: its longest
// existing prefix resolved as the kernel resolves it (symlinks first, then
// a ".." that follows them, which filepath.Clean alone would get wrong),
// then the missing rest, which has no symlink to resolve.
func RealPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not absolute", p)
	}
	elems := strings.Split(p, string(filepath.Separator))
	existing, i := string(filepath.Separator), 1
	for ; i < len(elems); i++ {
		if elems[i] == "" {
			continue
		}
		next := strings.TrimSuffix(existing, string(filepath.Separator)) + string(filepath.Separator) + elems[i]
		if _, err := os.Lstat(next); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			return "", err
		}
		existing = next
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{real}, elems[i:]...)...), nil
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

// Ensure creates the directory again (mode 0750) when it was removed while
// the library runs (a cleared thumbnail cache), at the real path it was
// opened with, so the checks made at the open still hold. It refuses, with
// an error wrapping ErrOutside, whatever no longer resolves to that path:
// a symlink put in its place or on its way. Its parent is not created: a
// state directory removed is not this directory's to restore.
func (d *Dir) Ensure() error {
	st, err := os.Lstat(d.real)
	if errors.Is(err, os.ErrNotExist) {
		// Mkdir follows a symlink on the way to the directory, not one in
		// its place (it fails with EEXIST, and the Lstat below finds it).
		parent := filepath.Dir(d.real)
		if real, err := filepath.EvalSymlinks(parent); err != nil {
			return err
		} else if real != parent {
			return fmt.Errorf("%w: %s now resolves to %s", ErrOutside, parent, real)
		}
		if err := os.Mkdir(d.real, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		st, err = os.Lstat(d.real)
	}
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symlink now", ErrOutside, d.real)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", d.real)
	}
	real, err := filepath.EvalSymlinks(d.real)
	if err != nil {
		return err
	}
	if real != d.real {
		return fmt.Errorf("%w: %s now resolves to %s", ErrOutside, d.real, real)
	}
	return nil
}

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
