package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestHungOutputEndpointRecordsStall: the output endpoint accepts the
// upload's connection and never answers. The upload stalls; the attempt is
// recorded as transcode_stalled and the job is back in the queue, although
// removing the staged object meets the same silent endpoint for a whole
// storage timeout, well past the lease TTL: that removal comes after the
// outcome is written, outside the lease, and within the storage timeout
// (fails without: the removal ran under the lease, the runner fenced
// itself, and the job stayed uploading until its lease expired).
func TestHungOutputEndpointRecordsStall(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) { j.Output.Endpoint = testsvc.SilentServer(t) })
		const storageTimeout = 5 * time.Second
		r := e.runner(func(s *runner.Settings) {
			s.LeaseTTL = 1500 * time.Millisecond
			s.StallTimeout = time.Second
			s.StorageTimeout = storageTimeout
			s.UploadTimeout = 0
		})
		start := time.Now()
		done := make(chan struct{})
		go func() { defer close(done); _, _ = r.RunOnce(context.Background()) }()
		waitFor(t, 10*time.Second, "the stall recorded", func() bool { return e.view(id).LastError != nil })
		recorded := time.Since(start)
		select {
		case <-done:
		case <-time.After(storageTimeout + 10*time.Second):
			t.Fatal("the attempt did not end within the storage timeout of its outcome")
		}
		v := e.view(id)
		if v.Status != schema.StatusQueued || v.AttemptCount != 1 || v.LastError.Code != "transcode_stalled" {
			t.Fatalf("status %s attempts %d err %+v, want queued / transcode_stalled", v.Status, v.AttemptCount, v.LastError)
		}
		t.Logf("stall recorded after %v, attempt over after %v", recorded, time.Since(start))
		e.scratchEmpty()
	})
}
