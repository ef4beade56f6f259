package runner_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/transcode/transcodetest"
	"github.com/vesta-cx/euterpe/daemon"
)

var oneOpus = []inbox.Rendition{{Name: "o", Codec: "opus", BitrateKbps: 64}}

// TestTransientStorageErrors: storage answering 503 (and the other
// retryable statuses) a few times is retried with backoff until it works.
func TestTransientStorageErrors(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, nil)
		e.proxy.Fail(503, 503, 502)
		v := e.drive(e.runner(nil), id, 30*time.Second)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 4 || e.proxy.Pending() != 0 {
			t.Fatalf("status %s attempts %d pending faults %d", v.Status, v.AttemptCount, e.proxy.Pending())
		}
		if got := e.events(id); got[len(got)-1] != "succeeded" || count(got, "queued") != 3 {
			t.Fatalf("events %v", got)
		}
		e.scratchEmpty()
	})
}

// TestRetryBudgetDeadLetter: storage that never recovers spends the
// attempts and ends in dead_letter with the last error recorded.
func TestRetryBudgetDeadLetter(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) { j.MaxAttempts = 3 })
		e.proxy.Fail(500, 504, 423)
		v := e.drive(e.runner(nil), id, 30*time.Second)
		if v.Status != schema.StatusDeadLetter || v.AttemptCount != 3 || v.LastError == nil || v.LastError.Code != "storage_unavailable" {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		if len(v.LastError.Message) > 512 {
			t.Fatalf("message %d chars", len(v.LastError.Message))
		}
	})
}

// TestThrottledUsesLargerBucket: a 429 schedules the retry from the
// rate-limited bucket (at least its base), a 503 from the normal one.
func TestThrottledUsesLargerBucket(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		r := e.runner(nil)
		for _, tc := range []struct {
			status   int
			code     string
			min, max time.Duration
		}{
			{429, "storage_throttled", testPolicy().RateLimited.Base, testPolicy().RateLimited.Cap},
			{503, "storage_unavailable", 0, testPolicy().Backoff.Cap},
		} {
			id := e.enqueue("in/src.wav", oneOpus, nil)
			e.proxy.Fail(tc.status)
			before := time.Now()
			if ok, err := r.RunOnce(context.Background()); !ok || err != nil {
				t.Fatalf("RunOnce: %v %v", ok, err)
			}
			v := e.view(id)
			if v.Status != schema.StatusQueued || v.LastError == nil || v.LastError.Code != tc.code || v.NextAttemptAt == nil {
				t.Fatalf("%d: %+v", tc.status, v)
			}
			wait := v.NextAttemptAt.Sub(before)
			if wait < tc.min-50*time.Millisecond || wait > tc.max+2*time.Second {
				t.Fatalf("%d: next attempt in %v, want between %v and %v", tc.status, wait, tc.min, tc.max)
			}
			e.drive(r, id, 20*time.Second)
		}
	})
}

// TestBadMediaFailsWithoutRetry: a source ffprobe cannot read ends in
// failed after one attempt.
func TestBadMediaFailsWithoutRetry(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		path := filepath.Join(t.TempDir(), "garbage.wav")
		transcodetest.Garbage(t, path, 100<<10)
		e.putFile("in/garbage.wav", path)
		id := e.enqueue("in/garbage.wav", oneOpus, nil)
		v := e.drive(e.runner(nil), id, 20*time.Second)
		if v.Status != schema.StatusFailed || v.AttemptCount != 1 || v.LastError.Code != "invalid_media" {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		e.scratchEmpty()
	})
}

// TestOversizeSourceRejectedBeforeDownload: a source over the limit fails
// with source_too_large and is never downloaded (no GET reaches storage).
func TestOversizeSourceRejectedBeforeDownload(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		size := e.putWAV("in/src.wav", 2)
		id := e.enqueue("in/src.wav", oneOpus, nil)
		r := e.runner(func(s *runner.Settings) { s.MaxSourceBytes = int(size - 1) })
		v := e.drive(r, id, 20*time.Second)
		if v.Status != schema.StatusFailed || v.AttemptCount != 1 || v.LastError.Code != "source_too_large" {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		if n := e.proxy.Requests(http.MethodGet); n != 0 {
			t.Fatalf("%d GET requests reached storage", n)
		}
		e.scratchEmpty()
	})
}

// TestFFmpegMissing: without ffmpeg the runner reports not ready and claims
// nothing, so the job keeps all its attempts; a job it already held is
// given back without spending one.
func TestFFmpegMissing(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, nil)
		r := e.runner(func(s *runner.Settings) { s.FFmpeg = "ffmpeg-not-installed" })
		ctx := context.Background()
		if err := r.Check(ctx); err == nil || !strings.HasPrefix(err.Error(), "ffmpeg_missing: ") {
			t.Fatalf("Check without ffmpeg: %v", err)
		}
		rep := daemon.Probe(ctx, time.Second, r.Checks()...)
		if got := rep.Checks["ffmpeg"]; rep.Ready || !strings.HasPrefix(got, "error(ffmpeg_missing: ") {
			t.Fatalf("/ready: ready=%v ffmpeg=%q", rep.Ready, got)
		}
		if ok, err := r.RunOnce(ctx); ok || err != nil {
			t.Fatalf("claimed without ffmpeg: %v %v", ok, err)
		}
		if v := e.view(id); v.Status != schema.StatusQueued || v.AttemptCount != 0 {
			t.Fatalf("status %s attempts %d", v.Status, v.AttemptCount)
		}
		// A job claimed before ffmpeg vanished.
		jobs, err := e.inbox.Claim(ctx, "w", 1, 5*time.Second)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v", err)
		}
		r.Process(ctx, jobs[0])
		if v := e.view(id); v.Status != schema.StatusQueued || v.AttemptCount != 0 || v.LastError == nil || v.LastError.Code != "ffmpeg_missing" ||
			!strings.Contains(v.LastError.Message, "ffmpeg-not-installed") {
			t.Fatalf("after release: status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		// With ffmpeg back the job runs.
		v := e.drive(e.runner(nil), id, 20*time.Second)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 {
			t.Fatalf("status %s attempts %d", v.Status, v.AttemptCount)
		}
		e.scratchEmpty()
	})
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
