package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// TestStaleRunnerStops: a runner whose lease was reclaimed mid-transcode
// (its clock or network stalled past the TTL) learns it on its next
// heartbeat, kills ffmpeg at once and writes nothing more; the new owner
// finishes the job and its outputs are recorded once.
func TestStaleRunnerStops(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/long.wav", 240)
		id := e.enqueue("in/long.wav", []inbox.Rendition{{Name: "slow", Codec: "flac", SampleRateHz: 96000}}, nil)
		a := e.runner(func(s *runner.Settings) { s.LeaseTTL = 600 * time.Millisecond })
		done := make(chan time.Time, 1)
		go func() {
			_, _ = a.RunOnce(context.Background())
			done <- time.Now()
		}()
		waitStatus(t, e, id, schema.StatusProcessing, 20*time.Second)
		waitFor(t, 10*time.Second, "ffmpeg running in the scratch dir", func() bool { return len(processesUsing(e.tmp)) > 0 })

		// The lease lapses in the database (the runner's heartbeats stopped
		// reaching it): another runner reclaims the job under a new
		// claim_version. A heartbeat landing between the two statements
		// renews the lease, so try again.
		waitFor(t, 10*time.Second, "the lapsed lease reclaimed", func() bool {
			if _, err := e.db.Exec(e.db.Rebind(`UPDATE inbox_jobs SET lease_expires_at = 1 WHERE id = ?`), id); err != nil {
				t.Fatal(err)
			}
			n, err := e.inbox.Reclaim(context.Background(), 1)
			return err == nil && n == 1
		})
		// Skip the requeue's backoff.
		if _, err := e.db.Exec(e.db.Rebind(`UPDATE inbox_jobs SET next_attempt_at = 0 WHERE id = ?`), id); err != nil {
			t.Fatal(err)
		}
		jobs, err := e.inbox.Claim(context.Background(), "runner-b", 1, time.Minute)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("reclaim: %v (%d jobs)", err, len(jobs))
		}
		reclaimed := time.Now()
		// The stale runner's next heartbeat finds the lease lost and kills
		// its ffmpeg: nothing works in the scratch dir any more. Two
		// heartbeats, and room for a busy machine: left running, the
		// encode goes on for seconds.
		killBy := reclaimed.Add(2*lease.HeartbeatInterval(600*time.Millisecond) + 2*time.Second)
		for len(processesUsing(e.tmp)) > 0 {
			if time.Now().After(killBy) {
				t.Fatalf("stale runner's ffmpeg still running %v after the reclaim: %v", time.Since(reclaimed), processesUsing(e.tmp))
			}
			time.Sleep(10 * time.Millisecond)
		}
		var stopped time.Time
		select {
		case stopped = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("stale runner still working 10s after losing its lease")
		}
		if d := stopped.Sub(reclaimed); d > 3*time.Second {
			t.Fatalf("stale runner took %v to stop", d)
		}
		v := e.view(id)
		if v.Status != schema.StatusClaimed || v.WorkerID == nil || *v.WorkerID != "runner-b" || v.ClaimVersion != jobs[0].Version {
			t.Fatalf("after stale runner stopped: %+v", v)
		}
		evBefore := e.events(id)

		// The new owner finishes; nothing the stale runner did shows.
		b := e.runner(nil)
		b.Process(context.Background(), reclaimedOn(t, e, jobs[0]))
		v = e.view(id)
		if v.Status != schema.StatusSucceeded || len(e.outputs(v)) != 1 {
			t.Fatalf("status %s outputs %s", v.Status, v.Outputs)
		}
		ev := e.events(id)
		if count(ev, "succeeded") != 1 || count(ev, "failed") != 0 || len(ev) <= len(evBefore) {
			t.Fatalf("events %v", ev)
		}
		e.scratchEmpty()
	})
}

// reclaimedOn returns j with its lease renewed, for the new owner to
// process.
func reclaimedOn(t *testing.T, e *env, j *inbox.Job) *inbox.Job {
	t.Helper()
	if err := e.inbox.Heartbeat(context.Background(), j, time.Minute); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestHeartbeatKeepsLease: two runner loops share one database and the
// lease is 1 s while the job takes several lease lengths (a runner that
// cannot renew within a TTL fences itself, so the lease leaves room for a
// renewal delayed by a loaded machine). Only the
// heartbeat keeps the other runner from reclaiming it: the job succeeds on
// its first claim (attempt_count 1, claim_version 1, one claimed event).
func TestHeartbeatKeepsLease(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		const ttl = time.Second
		e.putWAV("in/long.wav", 240)
		id := e.enqueue("in/long.wav", []inbox.Rendition{
			{Name: "opus", Codec: "opus", BitrateKbps: 128},
			{Name: "hi", Codec: "flac", SampleRateHz: 96000},
		}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range 2 {
			r := e.runner(func(s *runner.Settings) { s.LeaseTTL = ttl })
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.Run(ctx); err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
		}
		defer func() { cancel(); wg.Wait() }()
		waitStatus(t, e, id, schema.StatusProcessing, 20*time.Second)
		processing := time.Now()
		var v *inbox.View
		waitFor(t, 60*time.Second, "job finished", func() bool {
			v = e.view(id)
			return inbox.Transitions.IsTerminal(v.Status)
		})
		if d := time.Since(processing); d < 3*ttl {
			t.Fatalf("transcoding took %v, under three lease lengths: the test proves nothing", d)
		}
		ev := e.events(id)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 || v.ClaimVersion != 1 || count(ev, schema.StatusClaimed) != 1 {
			t.Fatalf("status %s attempts %d claim_version %d err %+v events %v", v.Status, v.AttemptCount, v.ClaimVersion, v.LastError, ev)
		}
		if n := len(e.outputs(v)); n != 2 {
			t.Fatalf("%d outputs", n)
		}
	})
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitStatus(t *testing.T, e *env, id, status string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if e.view(id).Status == status {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("job %s never reached %s (now %s)", id, status, e.view(id).Status)
}

// TestShutdownReleasesJob: cancelling Run mid-transcode kills ffmpeg, gives
// the job back to the queue without spending its attempt and leaves no
// scratch files.
func TestShutdownReleasesJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/long.wav", 240)
		id := e.enqueue("in/long.wav", []inbox.Rendition{{Name: "slow", Codec: "flac", SampleRateHz: 96000}}, nil)
		r := e.runner(nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		waitStatus(t, e, id, schema.StatusProcessing, 20*time.Second)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
		if v := e.view(id); v.Status != schema.StatusQueued || v.AttemptCount != 0 || v.WorkerID != nil {
			t.Fatalf("after shutdown: status %s attempts %d worker %v", v.Status, v.AttemptCount, v.WorkerID)
		}
		e.scratchEmpty()
	})
}
