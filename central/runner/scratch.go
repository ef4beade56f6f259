package runner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
//
// Something else may remove either file while the process lives (a temp
// cleaner ageing files, an operator, a remounted tmpfs): each attempt puts
// back what is missing, and a directory without its lock file is swept only
// once nothing says its owner may be alive (see abandoned).
type Scratch struct {
	root, owner string

	mu   sync.Mutex // guards lock, swapped when the lock file is put back
	lock *os.File

	// reapOpened, set by tests, runs in reap between opening an owner's
	// lock file and locking it.
	reapOpened func(owner string)
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
		if held(f, f.Name()) {
			return newScratch(root, owner, f)
		}
		_ = f.Close()
	}
	return nil, fmt.Errorf("temp dir lock in %s: lost to concurrent sweeps", root)
}

// held reports whether the open lock file f is still the one at path.
func held(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
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

func (s *Scratch) lockPath() string { return filepath.Join(s.root, s.owner+lockSuffix) }

// Attempt creates an empty directory for one job attempt. The returned
// cleanup removes it and everything in it; call it on every exit path.
func (s *Scratch) Attempt(jobID string, claimVersion int64) (string, func(), error) {
	if err := s.restore(); err != nil {
		return "", func() {}, fmt.Errorf("attempt dir: %w", err)
	}
	name := fmt.Sprintf("%s-v%d", sanitize(jobID), claimVersion)
	dir, err := os.MkdirTemp(s.Dir(), name+"-")
	if err != nil {
		return "", func() {}, fmt.Errorf("attempt dir: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// restore puts back this process's lock file and directory where something
// removed them: without it every attempt would fail for want of a
// directory, and without the lock file another runner's sweep could not
// tell the directory is alive. The lock comes back first, so the directory
// is never there unguarded by it.
func (s *Scratch) restore() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return err
	}
	if !held(s.lock, s.lockPath()) {
		if err := s.relock(); err != nil {
			return err
		}
	}
	return os.MkdirAll(s.Dir(), 0o700)
}

// relock places a new lock file, already locked, at the lock path: made
// and locked under a name no sweep looks at, then renamed into place, so
// no sweeper ever finds it there unlocked. Called with mu held.
func (s *Scratch) relock() error {
	f, err := os.CreateTemp(s.root, "."+s.owner+"-*")
	if err != nil {
		return fmt.Errorf("temp dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return fmt.Errorf("temp dir lock: %w", err)
	}
	if err := os.Rename(f.Name(), s.lockPath()); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return fmt.Errorf("temp dir lock: %w", err)
	}
	_ = s.lock.Close()
	s.lock = f
	return nil
}

// orphanAge is how long nothing in a directory without a lock file must
// have changed before a sweep removes it: such an owner may be alive (its
// lock file removed by someone else; it puts it back at its next attempt)
// while no lock proves it dead, and an attempt that only reads its files
// (an upload) changes nothing for up to EUTERPE_RUNNER_UPLOAD_TIMEOUT.
const orphanAge = 24 * time.Hour

// Sweep removes what dead runners left behind: every owner directory whose
// lock can be taken (its process is gone) along with its lock file, and
// every owner directory without a lock file that is abandoned by the rule
// of abandoned. It returns how many owners it removed. Live owners, this
// one included, are left alone.
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
			// creating the lock and the directory, or someone removed the
			// lock file, maybe of a live owner.
			dir := filepath.Join(s.root, owner)
			if !abandoned(dir, owner, time.Now()) {
				continue
			}
			if err := os.RemoveAll(dir); err != nil {
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

// abandoned reports whether the owner directory dir, which has no lock
// file, is a dead runner's: no process of the pid in its name
// (runner-<pid>-<rand>) runs in this pid namespace, and nothing in it
// changed for orphanAge (the owner may live in another namespace sharing
// the root). A pid reused by another process keeps the directory until
// that process ends; that errs on the side of a live owner.
func abandoned(dir, owner string, now time.Time) bool {
	pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(owner, "runner-"), "-", 2)[0])
	if err == nil && pid > 0 {
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			return false
		}
	}
	fresh := false
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil && now.Sub(info.ModTime()) < orphanAge {
			fresh = true
			return filepath.SkipAll
		}
		return nil
	})
	return !fresh
}

// reap removes owner's directory and lock file if no live process holds it.
func (s *Scratch) reap(owner string) (bool, error) {
	lockPath := filepath.Join(s.root, owner+lockSuffix)
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if err != nil {
		return false, nil // vanished under us: another sweeper got it
	}
	defer f.Close()
	if s.reapOpened != nil {
		s.reapOpened(owner)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false, nil // alive
	}
	// The file opened may since have been replaced at the path (a live
	// owner puts back a lock file something removed, and closing the old
	// one let this lock succeed): only the one at the path says its owner
	// is dead.
	if !held(f, lockPath) {
		return false, nil
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
	s.mu.Lock()
	defer s.mu.Unlock()
	err := os.RemoveAll(s.Dir())
	if held(s.lock, s.lockPath()) {
		_ = os.Remove(s.lockPath())
	}
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
