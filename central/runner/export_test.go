package runner

import (
	"context"
	"net/http"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
)

// SetGuardThreshold lowers the §11 output guardrail's source size for a
// test and returns a function restoring it.
func SetGuardThreshold(n int64) func() {
	old := guardThreshold
	guardThreshold = n
	return func() { guardThreshold = old }
}

// OutputLimit is the §11 guardrail's cap on each output of a source of
// srcSize bytes (0: none).
func OutputLimit(srcSize int64) int64 { return outputLimit(srcSize) }

// SetBeforeOutputs makes r call fn after transcoding, before it writes any
// output object: where a test pauses an attempt.
func SetBeforeOutputs(r *Runner, fn func(j *inbox.Job)) { r.beforeOutputs = fn }

// Watchdog is an attempt's progress clock, for tests of its own.
type Watchdog = watchdog

// NewWatchdog returns a watchdog reading the time from now.
func NewWatchdog(timeout time.Duration, now func() time.Time) *Watchdog {
	return newWatchdogClock(timeout, now)
}

// WatchdogTouch records progress on w.
func WatchdogTouch(w *Watchdog) { w.touch() }

// WatchdogStalled reports whether w has stalled.
func WatchdogStalled(w *Watchdog) bool { return w.stalled() }

// WatchdogLastProgress is the reading w measures stalls from.
func WatchdogLastProgress(w *Watchdog) time.Time { return w.lastProgress() }

// ProgressDue says whether a progress event for percent p follows one for
// last.
func ProgressDue(last, p int) bool { return progressDue(last, p) }

// CallRefresh makes one refresh call to url the way the runner does.
func CallRefresh(ctx context.Context, url string, req RefreshRequest) error {
	return refresher{client: http.DefaultClient, now: time.Now}.call(ctx, url, req, [][]byte{[]byte("secret")})
}

// ScratchDir is r's own directory under its temp root.
func ScratchDir(r *Runner) string { return r.scratch.Dir() }

// SetReapOpened makes s's sweeps call fn for each owner whose lock file
// they opened, before they try to lock it.
func SetReapOpened(s *Scratch, fn func(owner string)) { s.reapOpened = fn }

// SetCopyPartSize makes r promote an output larger than n bytes with a
// multipart copy in parts of n bytes.
func SetCopyPartSize(r *Runner, n int64) { r.store.CopyPartSize = n }
