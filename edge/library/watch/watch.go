package watch

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Enqueuer asks for a full scan; it returns busy=true when one is already
// active and the request must be retried later.
type Enqueuer func(ctx context.Context) (busy bool, err error)

// Watcher watches roots and requests scans.
type Watcher struct {
	Roots    []string
	Debounce time.Duration
	Enqueue  Enqueuer
	Log      *slog.Logger
	// Skip lists directories never watched (the state directory).
	Skip []string

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
	for _, r := range w.Roots {
		w.addTree(src, r)
	}
	var timer *time.Timer
	var fire <-chan time.Time
	dirty := false
	arm := func(d time.Duration) {
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		fire = timer.C
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-src.Events():
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Create) {
				w.addTree(src, ev.Name) // new folders (and their contents) are watched too
			}
			dirty = true
			arm(w.Debounce)
		case err, ok := <-src.Errors():
			if !ok {
				return nil
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.Log.Warn("library watcher overflowed; requesting a full scan")
				// re-add every directory: some creations were never seen
				for _, r := range w.Roots {
					w.addTree(src, r)
				}
				dirty = true
				arm(0)
				continue
			}
			w.Log.Warn("library watcher", "err", err)
		case <-fire:
			fire = nil
			if !dirty {
				continue
			}
			busy, err := w.Enqueue(ctx)
			if err != nil || busy {
				arm(w.Debounce) // keep the request; retry later
				continue
			}
			dirty = false
			if w.Requested != nil {
				w.Requested()
			}
		}
	}
}

func (w *Watcher) addTree(src source, root string) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		for _, s := range w.Skip {
			if s != "" && (p == s || len(p) > len(s) && p[:len(s)+1] == s+string(filepath.Separator)) {
				return fs.SkipDir
			}
		}
		if err := src.Add(p); err != nil {
			w.Log.Debug("watch", "path", p, "err", err)
		}
		return nil
	})
}
