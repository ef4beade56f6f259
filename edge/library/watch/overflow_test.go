package watch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// fakeSource is a source the test feeds by hand.
type fakeSource struct {
	events chan fsnotify.Event
	errs   chan error
	mu     sync.Mutex
	added  []string
}

func newFakeSource() *fakeSource {
	return &fakeSource{events: make(chan fsnotify.Event), errs: make(chan error)}
}

func (s *fakeSource) Events() <-chan fsnotify.Event { return s.events }
func (s *fakeSource) Errors() <-chan error          { return s.errs }
func (s *fakeSource) Add(dir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.added = append(s.added, dir)
	return nil
}

func (s *fakeSource) addedCount(dir string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.added {
		if d == dir {
			n++
		}
	}
	return n
}

// startWatcher runs w on src until the test ends.
func startWatcher(t *testing.T, w *Watcher, src source) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.run(ctx, src) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestOverflowRequestsFullScanAndRewatches(t *testing.T) {
	root := t.TempDir()
	dirs := []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b"), filepath.Join(root, "c")}
	for _, d := range dirs[1:] {
		os.MkdirAll(d, 0o755)
	}
	cases := []struct {
		name string
		err  error
		scan bool
	}{
		{"overflow", fsnotify.ErrEventOverflow, true},
		{"wrapped overflow", errors.Join(errors.New("inotify"), fsnotify.ErrEventOverflow), true},
		{"other watcher error", errors.New("inotify: something else"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := newFakeSource()
			var calls atomic.Int32
			w := &Watcher{
				Roots: []string{root}, Log: quietLog(),
				// A debounce far longer than the test: an overflow must
				// not wait for it.
				Debounce: time.Hour,
				Enqueue:  func(context.Context) (bool, error) { calls.Add(1); return false, nil },
			}
			startWatcher(t, w, src)
			src.errs <- c.err
			if !c.scan {
				// the loop has taken the error; give it time to misbehave
				time.Sleep(50 * time.Millisecond)
				if calls.Load() != 0 {
					t.Fatalf("%d scans requested for a non-overflow error", calls.Load())
				}
				return
			}
			waitFor(t, func() bool { return calls.Load() == 1 })
			for _, d := range dirs {
				if n := src.addedCount(d); n != 2 {
					t.Errorf("%s watched %d times, want 2 (start and after overflow)", d, n)
				}
			}
		})
	}
}

// TestOverflowScanWaitsForActiveScan feeds an overflow while a scan is
// running in a real library database: the request is refused by the
// single-active rule (no second active row), kept, and made once the
// running scan has finished — exactly once.
func TestOverflowScanWaitsForActiveScan(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "library.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := &policy.Policy{Store: st}
	running, err := p.EnqueueScan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.DB.Exec(`UPDATE jobs SET status = 'running' WHERE id = ?`, running.ID)

	var attempts, requested atomic.Int32
	src := newFakeSource()
	w := &Watcher{
		Roots: []string{t.TempDir()}, Log: quietLog(), Debounce: 20 * time.Millisecond,
		Enqueue: func(ctx context.Context) (bool, error) {
			attempts.Add(1)
			_, err := p.EnqueueScan(ctx)
			if errors.Is(err, policy.ErrActive) {
				return true, nil
			}
			return false, err
		},
		Requested: func() { requested.Add(1) },
	}
	startWatcher(t, w, src)
	src.errs <- fsnotify.ErrEventOverflow

	waitFor(t, func() bool { return attempts.Load() >= 2 }) // refused, then retried
	scans := func() []string {
		rows, _ := st.DB.Query(`SELECT status FROM jobs WHERE kind = 'scan' ORDER BY id`)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			rows.Scan(&s)
			out = append(out, s)
		}
		return out
	}
	if got := scans(); len(got) != 1 || requested.Load() != 0 {
		t.Fatalf("while a scan runs: rows %v, requested %d", got, requested.Load())
	}

	st.DB.Exec(`UPDATE jobs SET status = 'completed' WHERE id = ?`, running.ID)
	waitFor(t, func() bool { return requested.Load() == 1 })
	before := attempts.Load()
	time.Sleep(100 * time.Millisecond) // five debounce periods
	got := scans()
	sort.Strings(got)
	if len(got) != 2 || got[0] != "completed" || got[1] != "pending" || requested.Load() != 1 || attempts.Load() != before {
		t.Fatalf("after the running scan: rows %v, requested %d, attempts %d -> %d", got, requested.Load(), before, attempts.Load())
	}
}
