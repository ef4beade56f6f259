package watch

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// TestScanAtStart: with ScanAtStart a scan is requested once the roots
// are watched, without any event (what changed while nothing watched
// raises none), retried while another is active; without it, none.
func TestScanAtStart(t *testing.T) {
	cases := []struct {
		name  string
		start bool
		busy  int32 // refusals before the request is taken
		want  int32
	}{
		{"requested", true, 0, 1},
		{"retried while a scan is active", true, 2, 1},
		{"not asked for", false, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			var busy, calls atomic.Int32
			busy.Store(c.busy)
			src := newFakeSource()
			w := &Watcher{Roots: []string{root}, Log: quietLog(), Debounce: 10 * time.Millisecond, RootCheck: time.Hour,
				ScanAtStart: c.start,
				Enqueue: func(context.Context) (bool, error) {
					if busy.Add(-1) >= 0 {
						return true, nil
					}
					calls.Add(1)
					return false, nil
				}}
			startWatcher(t, w, src)
			if c.want > 0 {
				waitFor(t, func() bool { return calls.Load() >= c.want })
				if src.addedCount(root) == 0 {
					t.Fatal("scan requested before the root was watched")
				}
			}
			time.Sleep(20 * w.Debounce)
			if calls.Load() != c.want {
				t.Fatalf("%d scans requested, want %d", calls.Load(), c.want)
			}
		})
	}
}

// TestSteadyEventsDoNotPostponeScanForEver: a file written more often
// than the quiet period (a recording, a long copy) restarts it at each
// event; the scan is requested anyway MaxDelay after the first change, and
// again for the changes after that. While the request is refused (a scan
// is active), the events do not turn the retries into one per event.
func TestSteadyEventsDoNotPostponeScanForEver(t *testing.T) {
	cases := []struct {
		name     string
		busy     bool
		min, max int32 // requests (or attempts, when busy) during the stream
	}{
		// 1.2 s of events, a scan at most every 300 ms: 3 or 4, and one
		// more for each stall of the sender past the quiet period that a
		// busy machine may cause. Postponed for ever, there would be none.
		{"requested every MaxDelay", false, 2, 8},
		// Refused: retried every quiet period (100 ms), not every event (10 ms).
		{"refused requests retried each quiet period", true, 3, 16},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			var calls atomic.Int32
			src := newFakeSource()
			w := &Watcher{Roots: []string{root}, Log: quietLog(), Debounce: 100 * time.Millisecond,
				MaxDelay: 300 * time.Millisecond, RootCheck: time.Hour,
				Enqueue: func(context.Context) (bool, error) { calls.Add(1); return c.busy, nil }}
			startWatcher(t, w, src)
			rec := filepath.Join(root, "recording.wav")
			for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				src.events <- fsnotify.Event{Name: rec, Op: fsnotify.Write}
			}
			n := calls.Load()
			if n < c.min || n > c.max {
				t.Fatalf("%d requests during 1.2 s of events every 10 ms (quiet period 100 ms, MaxDelay 300 ms), want %d to %d",
					n, c.min, c.max)
			}
		})
	}
}

func TestDefaultMaxDelay(t *testing.T) {
	cases := []struct{ debounce, want time.Duration }{
		{10 * time.Millisecond, time.Minute},
		{3 * time.Second, time.Minute},
		{10 * time.Second, 100 * time.Second},
		{2 * time.Minute, 10 * time.Minute},
		{time.Hour, time.Hour},
	}
	for _, c := range cases {
		if got := DefaultMaxDelay(c.debounce); got != c.want {
			t.Errorf("DefaultMaxDelay(%v) = %v, want %v", c.debounce, got, c.want)
		}
	}
}
