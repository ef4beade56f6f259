package runner_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// TestProgressStep: a progress event follows the last one once the
// percentage has grown by at least 10 points (docs/transcode.md), not each
// time it crosses a multiple of 10: 15 then 21 is one event, not two. 100
// is left to the succeeded event.
func TestProgressStep(t *testing.T) {
	for _, tc := range []struct {
		last, p int
		want    bool
	}{
		{0, 0, false}, {0, 9, false}, {0, 10, true}, {0, 15, true},
		{15, 21, false}, {15, 24, false}, {15, 25, true}, {15, 40, true},
		{10, 19, false}, {10, 20, true}, {19, 20, false}, {19, 29, true},
		{85, 94, false}, {85, 95, true}, {95, 99, false}, {89, 99, true}, {90, 100, false},
	} {
		if got := runner.ProgressDue(tc.last, tc.p); got != tc.want {
			t.Errorf("last %d, now %d: event %v, want %v", tc.last, tc.p, got, tc.want)
		}
	}
}

// TestProgressEvents: while ffmpeg runs, its progress becomes intermediate
// processing events, each at least 10 points above the one before.
func TestProgressEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/long.wav", 240)
		id := e.enqueue("in/long.wav", []inbox.Rendition{
			{Name: "a", Codec: "flac", SampleRateHz: 96000}, {Name: "b", Codec: "mp3", BitrateKbps: 128},
		}, nil)
		r := e.runner(func(s *runner.Settings) { s.LeaseTTL = 300 * time.Millisecond })
		if v := e.drive(r, id, 60*time.Second); v.Status != schema.StatusSucceeded {
			t.Fatalf("status %s", v.Status)
		}
		rows, err := e.db.QueryContext(context.Background(), e.db.Rebind(`SELECT payload FROM job_outbox_events WHERE job_id = ? ORDER BY sequence`), id)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var pcts []int
		var runs [][]int
		for rows.Next() {
			var p string
			_ = rows.Scan(&p)
			var ev struct {
				Status   string `json:"status"`
				Progress *int   `json:"progress"`
			}
			_ = json.Unmarshal([]byte(p), &ev)
			if ev.Progress == nil && len(pcts) > 0 && ev.Status != schema.StatusProcessing {
				// A lease lost on a loaded machine retries the job: its
				// progress starts again after the new claim.
				runs = append(runs, pcts)
				pcts = nil
			}
			if ev.Progress != nil {
				if ev.Status != schema.StatusProcessing {
					t.Fatalf("progress event in status %s", ev.Status)
				}
				pcts = append(pcts, *ev.Progress)
			}
		}
		if len(pcts) > 0 {
			runs = append(runs, pcts)
		}
		if len(runs) == 0 {
			t.Fatal("no progress events")
		}
		for _, run := range runs {
			for i := 1; i < len(run); i++ {
				if run[i] < run[i-1]+10 {
					t.Fatalf("progress not grown by 10 points between events of an attempt: %v", runs)
				}
			}
		}
		t.Logf("progress events per attempt: %v", runs)
	})
}

// staleProgress is the inbox as a runner sees it when its progress write
// is the first to learn that the lease was lost.
type staleProgress struct {
	*inbox.Store
	writes atomic.Int32
}

func (s *staleProgress) Progress(_ context.Context, j *inbox.Job, _ int) error {
	s.writes.Add(1)
	return &lease.StaleError{Table: "inbox_jobs", ID: j.ID, Version: j.Version}
}

// TestStaleProgressStopsWork: a progress write that comes back stale
// aborts the attempt (contract §4): ffmpeg is killed at once and nothing
// more is written, the attempt abandoned as a lost lease (fails without:
// the write was only logged, and the attempt ran on to record success).
func TestStaleProgressStopsWork(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/long.wav", 240)
		id := e.enqueue("in/long.wav", []inbox.Rendition{
			{Name: "a", Codec: "flac", SampleRateHz: 96000}, {Name: "b", Codec: "mp3", BitrateKbps: 128},
		}, nil)
		jobs := &staleProgress{Store: e.inbox}
		m := runner.NewMetrics(nil)
		r := e.runnerOptions(func(s *runner.Settings) { s.LeaseTTL = 600 * time.Millisecond },
			func(o *runner.Options) { o.Jobs, o.Metrics = jobs, m })
		if ok, err := r.RunOnce(context.Background()); !ok || err != nil {
			t.Fatalf("RunOnce: %v %v", ok, err)
		}
		if n := jobs.writes.Load(); n != 1 {
			t.Fatalf("%d progress writes, want the one that came back stale", n)
		}
		if n := counter(t, m.Attempts.WithLabelValues(runner.OutcomeLeaseLost)); n != 1 {
			t.Fatalf("lease_lost attempts %v, want 1", n)
		}
		if v := e.view(id); v.Status != schema.StatusProcessing || v.LastError != nil {
			t.Fatalf("the attempt wrote on after its stale progress write: status %s err %+v", v.Status, v.LastError)
		}
		if ps := processesUsing(e.tmp); len(ps) > 0 {
			t.Fatalf("ffmpeg still running: %v", ps)
		}
		e.scratchEmpty()
	})
}
