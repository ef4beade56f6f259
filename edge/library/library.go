package library

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/labstack/echo/v4"
	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/api"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
	"github.com/vesta-cx/euterpe/edge/library/trash"
	"github.com/vesta-cx/euterpe/edge/library/watch"
)

// Library is the assembled component.
type Library struct {
	Store     *store.Store
	Policy    *policy.Policy
	Executor  *executor.Executor
	Scheduler *policy.Scheduler
	Watcher   *watch.Watcher
	Trash     *trash.Cleaner
	API       *api.Handlers
	log       *slog.Logger
}

// rootWritable reports why this process cannot write root: a delete moves
// files out of it. The unit's ProtectSystem=strict mounts it read-only
// (EROFS) until a drop-in lists it in ReadWritePaths=.
var rootWritable = func(root string) error { return unix.Access(root, unix.W_OK) }

// New opens <stateDir>/library.db (migrating it), checks every path
// setting and assembles the library.
func New(ctx context.Context, log *slog.Logger, stateDir, workerID string, s Settings) (*Library, error) {
	return build(ctx, log, stateDir, workerID, s, new(sync.Once))
}

// build is New; rootsWarned logs the roots this process cannot write once
// per start, by whichever attempt at the open first gets as far as the
// roots, not once per retry (an Opening keeps one for all its attempts).
func build(ctx context.Context, log *slog.Logger, stateDir, workerID string, s Settings, rootsWarned *sync.Once) (*Library, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(stateDir, 0o750); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	state, err := pathsafe.NewDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	roots, err := pathsafe.NewRoots(RootList(s.Roots))
	if errors.Is(err, fs.ErrNotExist) {
		// A root on a disk that mounts after the edge starts (an SD card,
		// a USB disk) is not there yet: the open is retried, the rest of
		// the edge runs, rather than the edge stop for a setting systemd
		// would not restart it over.
		return nil, fmt.Errorf("library roots (not mounted yet?): %w", err)
	}
	if err != nil {
		return nil, &daemon.SettingError{Setting: "EUTERPE_LIBRARY_ROOTS", Value: s.Roots, Reason: err.Error()}
	}
	for _, root := range roots.List() {
		// A root inside the state directory is scanned like any other, and
		// a state directory inside a root is skipped whole; but the state
		// directory as a root would be catalogued with library.db, the
		// thumbnails, the trash and what other components keep there.
		if root == state.Path() {
			return nil, &daemon.SettingError{Setting: "EUTERPE_LIBRARY_ROOTS", Value: s.Roots,
				Reason: fmt.Sprintf("library root %s is the state directory (EUTERPE_STATE_DIR); use a directory inside it", root)}
		}
	}
	rootsWarned.Do(func() {
		for _, root := range roots.List() {
			if err := rootWritable(root); err != nil {
				log.Warn("library root is not writable by this process: scans, hashes and thumbnails work, deleting duplicates fails",
					"root", root, "err", err.Error(),
					"hint", "under systemd make it writable in a drop-in (systemctl edit euterpe-edge): [Service] ReadWritePaths=-"+root)
			}
		}
	})
	// The thumbnails directory has no setting of its own: a <state>/thumbs
	// symlink may move the cache to a bigger disk, but one that leads it
	// into a library root is refused as the state directory's.
	thumbsPath := filepath.Join(state.Path(), "thumbs")
	thumbs, err := stateSubdir{
		what: "thumbnails directory", setting: "EUTERPE_STATE_DIR", value: stateDir, path: thumbsPath,
		outside: fmt.Errorf("thumbnails directory %s must not be the state directory", thumbsPath), elsewhere: true,
	}.open(state.Path(), roots.List())
	if err != nil {
		return nil, err
	}
	trashPath := s.TrashDir
	if trashPath == "" {
		trashPath = filepath.Join(state.Path(), "trash")
	}
	trashDir, err := stateSubdir{
		what: "trash directory", setting: "EUTERPE_LIBRARY_TRASH_DIR", value: s.TrashDir, path: trashPath,
		outside: errTrashOutside,
	}.open(state.Path(), roots.List())
	if err != nil {
		return nil, err
	}
	dbPath := filepath.Join(state.Path(), "library.db")
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		return nil, err
	}
	goarch, sha2 := thisMachine()
	algo, why, err := resolveHashAlgorithm(ctx, st, s.HashAlgorithm, goarch, sha2)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	log.Info("library hash algorithm", "algorithm", algo, "chosen_by", why)
	backoff := lease.Backoff{Base: 2 * s.Poll, Cap: 10 * s.LeaseTTL}
	x := &executor.Executor{
		Store: st, Catalog: st, Roots: roots, Thumbs: thumbs, Trash: trashDir, Log: log.With("component", "library-executor"),
		WorkerID: workerID, LeaseTTL: s.LeaseTTL, Poll: s.Poll, ThumbWorkers: s.ThumbWorkers,
		IOBytesPerSec: int64(s.IOBytesPerSec), Retry: backoff, SkipDirs: []string{state.Path()},
		MaxPixels: int64(s.ThumbMaxPixels), ThumbTimeout: s.ThumbTimeout,
		// The API asks for thumbnails of this format and size only: the
		// sweep removes those of another, which nothing can reach.
		ThumbFormat: s.ThumbFormat, ThumbSize: s.ThumbSize,
	}
	p := &policy.Policy{
		Store: st, HashAlgorithm: algo, ThumbQueueCapacity: s.ThumbQueueCapacity,
		ThumbMaxAttempts: s.ThumbMaxAttempts, ThumbsDir: thumbs.Path(), CleanupDelay: s.CleanupDelay,
		MaxJobRetries: s.MaxJobRetries, Wake: x.Wake,
	}
	l := &Library{
		Store: st, Policy: p, Executor: x, log: log,
		Trash: &trash.Cleaner{Dir: trashDir.Path(), Retention: s.TrashRetention, TrustClock: s.TrashTrustClock, Log: log.With("component", "library-trash")},
		Scheduler: &policy.Scheduler{
			Policy: p, Log: log.With("component", "library-policy"), Interval: s.PolicyInterval, Backoff: backoff,
			WALPath: dbPath + "-wal", WALBytes: int64(s.WALThresholdMB) << 20, WALMode: s.WALMode, AutoHash: s.AutoHash,
		},
		API: &api.Handlers{Store: st, Policy: p, ThumbFormat: s.ThumbFormat, ThumbSize: s.ThumbSize},
	}
	if s.Watch && len(roots.List()) > 0 {
		l.Watcher = &watch.Watcher{
			Roots: roots.List(), Debounce: s.WatchDebounce, Log: log.With("component", "library-watch"),
			Skip: []string{state.Path()}, ScanAtStart: true,
			Enqueue: func(ctx context.Context) (bool, error) {
				_, err := p.EnqueueScan(ctx)
				if errors.Is(err, policy.ErrActive) {
					return true, nil
				}
				return false, err
			},
		}
	}
	return l, nil
}

// Mount adds the /api/v1 library routes.
func (l *Library) Mount(e *echo.Echo) { l.API.Mount(e) }

// Checks reports the library database to /ready.
func (l *Library) Checks() []daemon.Check {
	return []daemon.Check{{Name: "library", Probe: l.Store.Ping}}
}

// Run runs the executor, the policy scheduler, the trash cleaner and the
// watcher until ctx ends. It leaves the database open: the HTTP routes
// may still be answering requests that began before the stop, and the
// caller closes it (Store.Close) once they are done. The watcher requests
// a scan at start, once it watches the roots: what changed while the
// daemon was down, a root added or removed, raise no event. Without it
// scans are only requested (POST /api/v1/scans).
func (l *Library) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	run := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil && ctx.Err() == nil {
				l.log.Error("library component stopped", "component", name, "err", err)
			}
		}()
	}
	run("executor", l.Executor.Run)
	run("policy", l.Scheduler.Run)
	run("trash", l.Trash.Run)
	if l.Watcher != nil {
		run("watch", l.Watcher.Run)
	}
	wg.Wait()
	return nil
}
