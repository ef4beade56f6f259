package executor

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultStallWarn is how long a hash job may read nothing before the
// log says so (Executor.StallWarn).
const DefaultStallWarn = 5 * time.Minute

// stallWatch notices a job that stopped making progress. A read from a
// disk that was pulled out, or from a hard-mounted network filesystem whose
// server is gone, can block in the kernel for ever: nothing can interrupt
// it, and the job keeps renewing its lease meanwhile, so without a word in
// the log the library would just stop hashing. The watch names the files
// in flight once the job has made no progress for the warning period, and
// says so again when it moves on.
type stallWatch struct {
	x     *Executor
	what  string
	after time.Duration
	start time.Time
	last  atomic.Int64 // time.Since(start) at the last progress, in ns

	mu       sync.Mutex
	inFlight map[string]int // path → readers
}

// watchStall starts a watch of the job what; the returned stop ends it.
func (x *Executor) watchStall(ctx context.Context, what string) (*stallWatch, func()) {
	w := &stallWatch{x: x, what: what, after: x.StallWarn, start: time.Now(), inFlight: map[string]int{}}
	if w.after <= 0 {
		w.after = DefaultStallWarn
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx)
	}()
	return w, func() { cancel(); <-done }
}

// progress records that the job moved on.
func (w *stallWatch) progress() { w.last.Store(int64(time.Since(w.start))) }

// begin and end bracket the reading of path.
func (w *stallWatch) begin(path string) {
	w.mu.Lock()
	w.inFlight[path]++
	w.mu.Unlock()
}

func (w *stallWatch) end(path string) {
	w.mu.Lock()
	if w.inFlight[path]--; w.inFlight[path] <= 0 {
		delete(w.inFlight, path)
	}
	w.mu.Unlock()
	w.progress()
}

// files returns up to ten of the paths in flight, sorted.
func (w *stallWatch) files() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.inFlight))
	for p := range w.inFlight {
		out = append(out, p)
	}
	slices.Sort(out)
	return out[:min(len(out), 10)]
}

func (w *stallWatch) run(ctx context.Context) {
	t := time.NewTicker(max(w.after/4, time.Millisecond))
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := time.Since(w.start) - time.Duration(w.last.Load())
		switch {
		case !warned && idle >= w.after:
			warned = true
			w.x.Log.Warn(w.what+" has made no progress; a read may be hung (a disk removed, a network filesystem's server gone), and the job holds its worker until it returns",
				"for", idle.Round(time.Second).String(), "files", w.files())
		case warned && idle < w.after:
			warned = false
			w.x.Log.Info(w.what + " is making progress again")
		}
	}
}
