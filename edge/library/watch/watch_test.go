package watch

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// fsSource is the real fsnotify source, telling the test what would
// otherwise have to be slept for: which directories have a watch (Add
// returns once the kernel watch is in place, so an event there is raised
// from then on) and which paths raised an event.
type fsSource struct {
	fw     *fsnotify.Watcher
	events chan fsnotify.Event
	mu     sync.Mutex
	added  map[string]int
	seen   map[string]bool // event names, and their last elements
}

func (s *fsSource) Events() <-chan fsnotify.Event { return s.events }
func (s *fsSource) Errors() <-chan error          { return s.fw.Errors }
func (s *fsSource) Add(dir string) error {
	if err := s.fw.Add(dir); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.added[dir]++
	return nil
}

// addedCount is how many times dir was given a watch.
func (s *fsSource) addedCount(dir string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.added[dir]
}

// watching reports whether every one of dirs has a watch.
func (s *fsSource) watching(dirs ...string) bool {
	for _, d := range dirs {
		if s.addedCount(d) == 0 {
			return false
		}
	}
	return true
}

// saw reports whether p raised an event. A file in a subdirectory of a
// moved directory raises its events under the old path (fsnotify keeps the
// path the subdirectory's watch was first put on): give it a name of its
// own and look for that name alone.
func (s *fsSource) saw(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[p]
}

// startFS runs w on a real fsnotify watcher until the test ends and returns
// once every one of dirs has a watch.
func startFS(t *testing.T, w *Watcher, dirs ...string) *fsSource {
	t.Helper()
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	s := &fsSource{fw: fw, events: make(chan fsnotify.Event), added: map[string]int{}, seen: map[string]bool{}}
	stop, forwarded := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(forwarded)
		defer close(s.events)
		for ev := range fw.Events {
			s.mu.Lock()
			s.seen[ev.Name] = true
			s.seen[filepath.Base(ev.Name)] = true
			s.mu.Unlock()
			select {
			case s.events <- ev:
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		fw.Close()
		<-forwarded
	})
	startWatcher(t, w, s) // its cleanup runs first: the loop ends before the watcher closes
	waitFor(t, func() bool { return s.watching(dirs...) })
	return s
}

func TestWatcherDebouncesAndFollowsNewFolders(t *testing.T) {
	root := t.TempDir()
	var calls, busy atomic.Int32
	busy.Store(1) // first attempt finds a scan active and must retry
	// The debounce is far above the time the burst takes, so only a writer
	// stalled that long twice (the busy retry absorbs once) splits it.
	const debounce = 200 * time.Millisecond
	w := &Watcher{
		Roots: []string{root}, Debounce: debounce, Log: quietLog(), RootCheck: time.Hour,
		Enqueue: func(context.Context) (bool, error) {
			if busy.Add(-1) >= 0 {
				return true, nil
			}
			calls.Add(1)
			return false, nil
		},
	}
	src := startFS(t, w, root)
	for i := 0; i < 20; i++ { // a burst
		if err := os.WriteFile(filepath.Join(root, "f"+string(rune('a'+i))), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return calls.Load() >= 1 })
	time.Sleep(3 * debounce) // a split burst would request its second scan by now
	if calls.Load() != 1 {
		t.Fatalf("burst produced %d scans, want 1", calls.Load())
	}
	// A new folder is watched: a file created inside it triggers a scan.
	sub := filepath.Join(root, "new", "deeper")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return calls.Load() >= 2 && src.watching(sub) })
	before := calls.Load()
	x := filepath.Join(sub, "x")
	if err := os.WriteFile(x, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return src.saw(x) && calls.Load() > before })
}

func waitFor(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
