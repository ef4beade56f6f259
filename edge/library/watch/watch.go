package watch

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
)

// Enqueuer asks for a full scan; it returns busy=true when one is already
// active and the request must be retried later.
type Enqueuer func(ctx context.Context) (busy bool, err error)

// DefaultMaxDelay is the longest a change waits for its scan under a
// steady stream of events, for a quiet period of debounce: ten quiet
// periods, at least a minute (a scan walks the whole library, and one a
// few seconds after the last ended would keep the disk busy through a long
// copy) and at most ten minutes, never less than the quiet period itself.
func DefaultMaxDelay(debounce time.Duration) time.Duration {
	return max(debounce, min(max(10*debounce, time.Minute), 10*time.Minute))
}

// Watcher watches roots and requests scans.
type Watcher struct {
	Roots    []string
	Debounce time.Duration
	Enqueue  Enqueuer
	Log      *slog.Logger
	// Skip lists directories never watched (the state directory), unless
	// one holds a root: a root kept inside the state directory is watched.
	Skip []string

	// RootCheck is how often each root is looked at to find one that was
	// deleted and created again, replaced, or unmounted and mounted again:
	// its watch went with the old directory, and nothing else would ever
	// watch the new one (default 5s; one lstat per root).
	RootCheck time.Duration
	// FallbackScan is how often a full scan is requested while some
	// directories could not be watched (the inotify watch limit): their
	// changes raise no event (default 10m).
	FallbackScan time.Duration
	// MaxDelay is the longest a change waits for its scan while further
	// events keep restarting the quiet period (a recording or a copy
	// written for hours); the scan is then requested anyway (default
	// DefaultMaxDelay(Debounce)).
	MaxDelay time.Duration
	// ScanAtStart requests a scan once the roots are watched, after the
	// quiet period: what changed while nothing watched (the daemon was
	// down, a root was added or removed, the first start) raises no event.
	ScanAtStart bool
	// MountInfo is the mount table looked at with the roots (default
	// /proc/self/mountinfo): a disk mounted or unmounted below a root
	// raises no inotify event, and its directories need watches.
	MountInfo string

	// Requested counts scan requests made (for tests and metrics).
	Requested func()
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer fw.Close()
	return w.run(ctx, fsnotifySource{fw})
}

// source is what the event loop reads: a stream of events, a stream of
// errors (fsnotify.ErrEventOverflow among them) and a way to watch one
// more directory. fsnotifySource adapts *fsnotify.Watcher.
type source interface {
	Events() <-chan fsnotify.Event
	Errors() <-chan error
	Add(dir string) error
}

type fsnotifySource struct{ w *fsnotify.Watcher }

func (s fsnotifySource) Events() <-chan fsnotify.Event { return s.w.Events }
func (s fsnotifySource) Errors() <-chan error          { return s.w.Errors }
func (s fsnotifySource) Add(dir string) error          { return s.w.Add(dir) }

// run watches the roots through src and requests scans until ctx ends or
// src closes its streams.
func (w *Watcher) run(ctx context.Context, src source) error {
	if w.Log == nil {
		w.Log = slog.Default()
	}
	if w.Debounce <= 0 {
		w.Debounce = 2 * time.Second
	}
	if w.RootCheck <= 0 {
		w.RootCheck = 5 * time.Second
	}
	if w.FallbackScan <= 0 {
		w.FallbackScan = 10 * time.Minute
	}
	if w.MaxDelay <= 0 {
		w.MaxDelay = DefaultMaxDelay(w.Debounce)
	}
	if w.MountInfo == "" {
		w.MountInfo = "/proc/self/mountinfo"
	}
	var timer *time.Timer
	var fire <-chan time.Time
	arm := func(d time.Duration) {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		fire = timer.C
	}
	// dirty is set from a change until its scan is requested; dirtySince
	// is when it was set, and a request refused as busy is not retried
	// before notBefore, however many events arrive meanwhile.
	dirty := false
	var dirtySince, notBefore time.Time
	request := func(wait time.Duration) {
		now := time.Now()
		if !dirty {
			dirty, dirtySince = true, now
		}
		if left := dirtySince.Add(w.MaxDelay).Sub(now); left < wait {
			wait = max(left, 0)
		}
		if retry := notBefore.Sub(now); retry > wait {
			wait = retry
		}
		arm(wait)
	}
	rootCheck := time.NewTicker(w.RootCheck)
	var fallback *time.Ticker
	var fallbackC <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		rootCheck.Stop()
		if fallback != nil {
			fallback.Stop()
		}
	}()
	// watched holds the identity of the directory each root's watch was
	// put on; partial is set while some directory could not be watched.
	watched := make(map[string]dirIdentity, len(w.Roots))
	created := make(map[string]bool) // directories created since the last request
	partial, warned := false, false
	watchAll := func() {
		var lim limitErrors
		for _, r := range w.Roots {
			if id, ok := identityOf(r); ok {
				watched[r] = id
			}
			w.addTree(src, r, &lim)
		}
		wasPartial := partial
		partial = lim.n > 0
		switch {
		case partial && !warned:
			warned = true
			w.Log.Warn("library watcher cannot watch every directory: changes in those raise no event and are found by a full scan at each interval",
				"unwatched", lim.n, "first", lim.first, "err", lim.err, "interval", w.FallbackScan,
				"hint", "raise the inotify watch limit: sysctl fs.inotify.max_user_watches=524288")
		case !partial && wasPartial:
			warned = false
			w.Log.Info("library watcher watches every directory again")
		}
		if partial && fallback == nil {
			fallback = time.NewTicker(w.FallbackScan)
			fallbackC = fallback.C
		}
		if !partial && fallback != nil {
			fallback.Stop()
			fallback, fallbackC = nil, nil
		}
	}
	mounts, _ := w.mountsUnderRoots()
	watchAll()
	if w.ScanAtStart {
		request(w.Debounce)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-src.Events():
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				// A root's own watch is gone with it; the root check puts
				// one on whatever directory appears at its path, even on a
				// new one that reuses the old inode number.
				for _, r := range w.Roots {
					if ev.Name == r {
						delete(watched, r)
					}
				}
			}
			if ev.Has(fsnotify.Create) {
				// New folders (and their contents) are watched too.
				var lim limitErrors
				w.addTree(src, ev.Name, &lim)
				if lim.n > 0 && !partial {
					watchAll()
				}
				if _, isDir := identityOf(ev.Name); isDir {
					created[ev.Name] = true
				}
			}
			request(w.Debounce)
		case err, ok := <-src.Errors():
			if !ok {
				return nil
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.Log.Warn("library watcher overflowed; requesting a full scan")
				// re-add every directory: some creations were never seen
				watchAll()
				request(0)
				continue
			}
			w.Log.Warn("library watcher", "err", err)
		case <-rootCheck.C:
			// A root deleted and created again, moved away and replaced, or
			// mounted again is another directory: the old watch went with
			// the old one (an unmount removes it without any event).
			for _, r := range w.Roots {
				id, ok := identityOf(r)
				if !ok {
					delete(watched, r)
					continue
				}
				if old, had := watched[r]; had && old == id {
					continue
				}
				watched[r] = id
				var lim limitErrors
				w.addTree(src, r, &lim)
				if lim.n > 0 && !partial {
					watchAll()
				}
				request(w.Debounce)
			}
			// A disk mounted below a root hides the directory it is
			// mounted on, watches and all, and one unmounted takes its
			// watches along, both without an event: the whole tree is
			// watched again and scanned.
			if now, ok := w.mountsUnderRoots(); ok && now != mounts {
				mounts = now
				watchAll()
				request(w.Debounce)
			}
		case <-fallbackC:
			// Try again (the limit may have been raised), and scan for
			// what the directories without a watch may hold.
			watchAll()
			request(0)
		case <-fire:
			fire = nil
			if !dirty {
				continue
			}
			// A watched directory moved within the roots raises Create at
			// its new name, and then fsnotify drops its watch on the
			// move of the directory itself (IN_MOVE_SELF), even when the
			// Create was handled first and watched the new name: the
			// directory would raise no further event. By the quiet period
			// that has been done, so the directories created since the
			// last request are watched again now, before the scan that
			// sees what was written in them meanwhile.
			var lim limitErrors
			w.rewatch(src, created, &lim)
			clear(created)
			if lim.n > 0 && !partial {
				watchAll()
			}
			busy, err := w.Enqueue(ctx)
			if err != nil || busy {
				// Keep the request and retry after a quiet period, which
				// later events do not bring forward.
				notBefore = time.Now().Add(w.Debounce)
				arm(w.Debounce)
				continue
			}
			dirty, notBefore = false, time.Time{}
			if w.Requested != nil {
				w.Requested()
			}
		}
	}
}

// rewatch watches the trees of dirs again, each once: a directory inside
// another of dirs is walked with it.
func (w *Watcher) rewatch(src source, dirs map[string]bool, lim *limitErrors) {
	for d := range dirs {
		if !insideAny(dirs, d) {
			w.addTree(src, d, lim)
		}
	}
}

// insideAny reports whether some proper ancestor of p is in dirs.
func insideAny(dirs map[string]bool, p string) bool {
	for {
		parent := filepath.Dir(p)
		if parent == p {
			return false
		}
		if dirs[parent] {
			return true
		}
		p = parent
	}
}

// limitErrors counts the directories a pass could not watch because a
// kernel limit was reached, and the first of them.
type limitErrors struct {
	n     int
	first string
	err   error
}

// isLimit reports an inotify limit: ENOSPC is the per-user watch limit
// (fs.inotify.max_user_watches), ENOMEM the kernel's memory for watches.
func isLimit(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.ENOMEM)
}

func (w *Watcher) addTree(src source, root string, lim *limitErrors) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if w.skipped(p) {
			return fs.SkipDir
		}
		if err := src.Add(p); err != nil {
			if isLimit(err) {
				if lim.n == 0 {
					lim.first, lim.err = p, err
				}
				lim.n++
				return nil
			}
			w.Log.Debug("watch", "path", p, "err", err)
		}
		return nil
	})
}

// skipped reports whether directory p lies in one of Skip that holds no
// root.
func (w *Watcher) skipped(p string) bool {
	for _, s := range w.Skip {
		if s == "" || !pathsafe.Under(s, p) {
			continue
		}
		holdsRoot := false
		for _, r := range w.Roots {
			holdsRoot = holdsRoot || pathsafe.Under(s, r)
		}
		if !holdsRoot {
			return true
		}
	}
	return false
}

// dirIdentity tells one directory from another at the same path: another
// inode, another filesystem, or another mount of the same one (a disk
// unmounted and mounted again keeps its device and inode numbers).
type dirIdentity struct {
	dev, ino, mnt uint64
}

// identityOf is the identity of the directory at p, false when p is not a
// directory (gone, or a symlink, which is never watched).
func identityOf(p string) (dirIdentity, bool) {
	// The unique mount id (Linux 6.8) is never reused; the older one is
	// given again to the next mount once freed, so an unmount and mount
	// in quick succession may go unnoticed on older kernels.
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_MNT_ID_UNIQUE, &st)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return dirIdentity{}, false
	}
	id := dirIdentity{dev: uint64(st.Dev_major)<<32 | uint64(st.Dev_minor), ino: st.Ino}
	if st.Mask&(unix.STATX_MNT_ID_UNIQUE|unix.STATX_MNT_ID) != 0 {
		id.mnt = st.Mnt_id
	}
	return id, true
}
