package runner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Scratch is a runner process's private area under the temp root:
//
//	<root>/<owner>.lock   held with flock(LOCK_EX) while the process lives
//	<root>/<owner>/       one directory per job attempt
//
// The kernel drops the lock when the process dies, even by SIGKILL, so a
// sweep can tell the leftovers of a dead runner from the live work of
// another process sharing the same root: whoever can take a lock owns the
// corpse and removes it.
type Scratch struct {
	root, owner string
	lock        *os.File
}

const lockSuffix = ".lock"

// OpenScratch creates the root if needed and takes a new owner slot in it.
func OpenScratch(root string) (*Scratch, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("temp dir %s: %w", root, err)
	}
	for range 5 {
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		owner := "runner-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(rnd[:])
		f, err := os.OpenFile(filepath.Join(root, owner+lockSuffix), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("temp dir lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("temp dir lock: %w", err)
		}
		// A sweeper may have taken the lock between create and flock and
		// unlinked the file: then ours is orphaned, start over.
		if held(f) {
			return newScratch(root, owner, f)
		}
		_ = f.Close()
	}
	return nil, fmt.Errorf("temp dir lock in %s: lost to concurrent sweeps", root)
}

// held reports whether the open lock file is still the one at its path.
func held(f *os.File) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(f.Name())
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

func newScratch(root, owner string, f *os.File) (*Scratch, error) {
	if err := os.MkdirAll(filepath.Join(root, owner), 0o700); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("temp dir %s: %w", root, err)
	}
	return &Scratch{root: root, owner: owner, lock: f}, nil
}

// Dir is this process's directory.
func (s *Scratch) Dir() string { return filepath.Join(s.root, s.owner) }

// Attempt creates an empty directory for one job attempt. The returned
// cleanup removes it and everything in it; call it on every exit path.
func (s *Scratch) Attempt(jobID string, claimVersion int64) (string, func(), error) {
	name := fmt.Sprintf("%s-v%d", sanitize(jobID), claimVersion)
	dir, err := os.MkdirTemp(s.Dir(), name+"-")
	if err != nil {
		return "", func() {}, fmt.Errorf("attempt dir: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// Sweep removes what dead runners left behind: every owner directory whose
// lock can be taken (its process is gone) along with its lock file. It
// returns how many owners it removed. Live owners, this one included, are
// left alone.
func (s *Scratch) Sweep() (int, error) {
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return 0, fmt.Errorf("sweep %s: %w", s.root, err)
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "runner-") || name == s.owner || name == s.owner+lockSuffix {
			continue
		}
		owner := strings.TrimSuffix(name, lockSuffix)
		if !e.IsDir() && owner == name {
			continue
		}
		if e.IsDir() {
			if _, err := os.Stat(filepath.Join(s.root, owner+lockSuffix)); err == nil {
				continue // handled through its lock file
			}
			// A directory without a lock file: its owner died between
			// creating the lock and the directory, or the lock was removed.
			if err := os.RemoveAll(filepath.Join(s.root, owner)); err != nil {
				errs = append(errs, err)
			} else {
				removed++
			}
			continue
		}
		ok, err := s.reap(owner)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// reap removes owner's directory and lock file if no live process holds it.
func (s *Scratch) reap(owner string) (bool, error) {
	lockPath := filepath.Join(s.root, owner+lockSuffix)
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		return false, nil // vanished under us: another sweeper got it
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false, nil // alive
	}
	if err := os.RemoveAll(filepath.Join(s.root, owner)); err != nil {
		return false, fmt.Errorf("sweep %s: %w", owner, err)
	}
	if err := os.Remove(lockPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("sweep %s: %w", owner, err)
	}
	return true, nil
}

// Close removes this process's directory and releases its lock.
func (s *Scratch) Close() error {
	err := os.RemoveAll(s.Dir())
	_ = os.Remove(s.lock.Name())
	_ = s.lock.Close()
	return err
}

func sanitize(id string) string {
	var b strings.Builder
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 64 {
			break
		}
	}
	return b.String()
}
