package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

const scanBatch = 2000

// unreadNamed is how many unreadable paths a session's message names; all
// of them are counted.
const unreadNamed = 20

// scan walks every root without following symlinks, records what it saw
// in a scan session and library_files, and marks files of the fully walked
// roots that it did not see as missing. A symlink is never followed: one
// that resolves outside every root is counted as refused, one inside a root
// is skipped because its target is walked on its own.
//
// Not seeing a file proves it gone only where the scan could look. A
// directory it cannot list or a file it cannot stat (permission denied, an
// I/O error) is counted as unreadable, and the catalogued files at or under
// it keep their state; the scan still succeeds, since one such directory
// (lost+found on a mounted disk, owned by root) would otherwise fail every
// scan. A root that cannot be walked, or in which the walk finds nothing at
// all (no file, nothing unreadable) while the catalog holds files there (a
// disk not mounted on its mount point), is not walked: nothing of it is
// marked missing and the scan fails.
//
// A directory below a root under which the walk finds no file, on another
// device than the files catalogued under it were seen on, is a second disk
// not mounted on its mount point inside the root: those files keep their
// state too, and the scan counts and names the directory but succeeds.
func (x *Executor) scan(ctx context.Context, c *Claim) error {
	roots := x.Roots.List()
	sid, err := x.Catalog.StartScanSession(ctx, c.Job.ID, roots)
	if err != nil {
		return fmt.Errorf("start scan session: %w", err)
	}
	var counts store.ScanCounts
	finish := func(status string, msg string) {
		if err := x.Catalog.FinishScanSession(context.WithoutCancel(ctx), sid, status, counts, msg); err != nil {
			x.Log.Warn("finish scan session", "session", sid, "err", err)
		}
	}
	var walked []store.WalkedRoot
	var rootErrs, unread []string
	batch := make([]store.FileStat, 0, scanBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, ch, err := x.Catalog.UpsertFiles(ctx, sid, batch)
		if err != nil {
			return err
		}
		counts.New += n
		counts.Changed += ch
		batch = batch[:0]
		c.SetProgress(counts.Seen, 0)
		return nil
	}
	for _, root := range roots {
		var rootUnread []string
		dirs := newDirDevs(root)
		notRead := func(p string, err error) {
			counts.Unreadable++
			rootUnread = append(rootUnread, p)
			if len(unread) < unreadNamed {
				unread = append(unread, pathError(p, err))
			}
			x.Log.Debug("scan: path not read", "path", p, "err", err)
		}
		seenBefore := counts.Seen
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err == nil && d.IsDir() {
				if x.skipDir(root, p) {
					return fs.SkipDir
				}
				if x.scanDir != nil {
					err = x.scanDir(p)
				}
				if err == nil {
					dirs.enter(p, d, x.dirDevice)
				}
			}
			if err != nil {
				if p == root {
					return err
				}
				// Below the root, WalkDir reports only directories it
				// could not list; one that no longer exists took its files
				// with it, any other was simply not read.
				if d != nil && d.IsDir() {
					if !errors.Is(err, fs.ErrNotExist) {
						notRead(p, err)
					}
					return fs.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			if d.Type()&fs.ModeSymlink != 0 {
				if _, _, err := x.Roots.Resolve(p); errors.Is(err, pathsafe.ErrOutside) {
					counts.Refused++
				}
				return nil
			}
			if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), stagePrefix) {
				return nil
			}
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // vanished during the walk
			}
			if err != nil {
				notRead(p, err)
				return nil
			}
			counts.Seen++
			dirs.fileIn(filepath.Dir(p))
			batch = append(batch, store.FileStat{Root: root, Path: p, Size: info.Size(), MtimeNS: info.ModTime().UnixNano(), Ident: identOf(info)})
			if len(batch) >= scanBatch {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if errors.Is(err, store.ErrScanSessionClosed) {
			// This run lost its lease and its session was closed (the job
			// was recovered, or runs again): whoever runs the job next
			// owns the catalog, and this run's counts mean nothing.
			return err
		}
		if ctx.Err() != nil {
			finish(store.StatusFailed, "scan interrupted")
			return ctx.Err()
		}
		// A root with something unreadable in it is there (mounted); one
		// showing nothing at all may be an empty mount point.
		if err == nil && counts.Seen == seenBefore && len(rootUnread) == 0 {
			err = x.checkEmptyRoot(ctx, root)
		}
		if err != nil {
			rootErrs = append(rootErrs, fmt.Sprintf("%s: %v", root, err))
			batch = batch[:0]
			continue
		}
		walked = append(walked, store.WalkedRoot{Root: root, Unread: rootUnread, Empty: dirs.empty()})
	}
	missing, err := x.Catalog.MarkMissing(ctx, sid, walked)
	if err != nil {
		if !errors.Is(err, store.ErrScanSessionClosed) {
			finish(store.StatusFailed, err.Error())
		}
		return fmt.Errorf("mark missing: %w", err)
	}
	counts.Missing = missing.Marked
	c.SetProgress(counts.Seen, 1)
	var msgs []string
	if len(rootErrs) > 0 {
		msgs = append(msgs, "roots not walked: "+strings.Join(rootErrs, "; "))
	}
	if counts.Unreadable > 0 {
		x.Log.Warn("scan: paths not read; their catalogued files keep their state",
			"session", sid, "count", counts.Unreadable, "paths", strings.Join(unread, "; "))
		noun := "paths"
		if counts.Unreadable == 1 {
			noun = "path"
		}
		msgs = append(msgs, fmt.Sprintf("%d %s not read, their files kept: %s", counts.Unreadable, noun, strings.Join(unread, "; ")))
	}
	if len(missing.Unmounted) > 0 {
		m := unmountedMessage(missing.Unmounted)
		x.Log.Warn("scan: directories on another device than their catalogued files; those files keep their state",
			"session", sid, "dirs", m)
		msgs = append(msgs, m)
	}
	msg := daemon.CapMessage(strings.Join(msgs, "; "))
	if len(rootErrs) > 0 {
		finish(store.StatusFailed, msg)
		return errors.New(msg)
	}
	finish(store.StatusSucceeded, msg)
	return nil
}

// unmountedMessage names, in order, the directories whose files were kept
// because their filesystem is not mounted there, with how many each kept.
func unmountedMessage(kept map[string]int64) string {
	dirs := slices.Sorted(maps.Keys(kept))
	var total int64
	named := make([]string, 0, min(len(dirs), unreadNamed))
	for i, d := range dirs {
		total += kept[d]
		if i < unreadNamed {
			named = append(named, fmt.Sprintf("%s (%d)", d, kept[d]))
		}
	}
	return fmt.Sprintf("%d files kept under directories on another device than they were catalogued on (not mounted?): %s",
		total, strings.Join(named, ", "))
}

// dirDevs is what a scan learns of one root's directories: the device of
// each it entered, and which have a file somewhere below them.
type dirDevs struct {
	root string
	dev  map[string]int64
	full map[string]bool
}

func newDirDevs(root string) *dirDevs {
	return &dirDevs{root: filepath.Clean(root), dev: make(map[string]int64), full: make(map[string]bool)}
}

// enter records the device of directory p. One whose device cannot be told
// is taken as holding files, which leaves the files under it to the usual
// rule (not seen, marked missing) rather than keeping them on no evidence.
func (w *dirDevs) enter(p string, d fs.DirEntry, devOf func(string, fs.DirEntry) (int64, error)) {
	dev, err := devOf(p, d)
	if err != nil {
		w.fileIn(p)
		return
	}
	w.dev[filepath.Clean(p)] = dev
}

// fileIn records that directory dir, and so each one above it up to the
// root, has a file below it. It stops at the first one already recorded,
// so a walk costs one step per directory, not per file.
func (w *dirDevs) fileIn(dir string) {
	for p := filepath.Clean(dir); !w.full[p]; {
		w.full[p] = true
		parent := filepath.Dir(p)
		if p == w.root || parent == p {
			return
		}
		p = parent
	}
}

// empty is the directories entered under which no file was seen, with
// their devices; nil when there is none.
func (w *dirDevs) empty() map[string]int64 {
	var out map[string]int64
	for p, dev := range w.dev {
		if w.full[p] {
			continue
		}
		if out == nil {
			out = make(map[string]int64)
		}
		out[p] = dev
	}
	return out
}

// dirDevice is the device directory p sits on (x.dirDev when set).
func (x *Executor) dirDevice(p string, d fs.DirEntry) (int64, error) {
	if x.dirDev != nil {
		return x.dirDev(p, d)
	}
	info, err := d.Info()
	if err != nil {
		return 0, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.ErrUnsupported
	}
	return int64(st.Dev), nil
}

// EmptyRootError is a root in which a scan found no file while the catalog
// holds files there: most likely a disk that is not mounted, whose empty
// mount point must not make the whole disk look deleted.
type EmptyRootError struct {
	Root  string
	Files int64 // live files the catalog holds in Root
}

func (e *EmptyRootError) Error() string {
	return fmt.Sprintf("no file found, while the catalog holds %d there (not mounted?)", e.Files)
}

// checkEmptyRoot is called for a root whose walk found no file: it fails
// with *EmptyRootError when the catalog holds live files of root.
func (x *Executor) checkEmptyRoot(ctx context.Context, root string) error {
	n, err := x.Store.LiveFiles(ctx, root)
	if err != nil {
		return err
	}
	if n > 0 {
		return &EmptyRootError{Root: root, Files: n}
	}
	return nil
}

// pathError is err as "path: reason", without repeating a path the error
// already names.
func pathError(p string, err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == p {
		return err.Error()
	}
	return p + ": " + err.Error()
}

// skipDir reports whether p, met walking root, lies in one of SkipDirs.
// A skip directory that holds the root itself (a root kept inside the
// state directory) skips nothing of it: the root would never be scanned.
func (x *Executor) skipDir(root, p string) bool {
	for _, s := range x.SkipDirs {
		if s != "" && pathsafe.Under(s, p) && !pathsafe.Under(s, root) {
			return true
		}
	}
	return false
}

// identOf is the ctime and (device, inode) of a stat, which the catalog
// compares besides size and mtime: a rewrite that keeps the size and
// restores the mtime (a tag editor preserving it) cannot restore the ctime.
func identOf(info fs.FileInfo) *store.FileIdent {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return &store.FileIdent{
		CtimeNS: st.Ctim.Nano(),
		Dev:     int64(st.Dev),
		Inode:   int64(st.Ino),
	}
}
