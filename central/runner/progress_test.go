package runner_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
)

// TestProgressEvents: while ffmpeg runs, its progress becomes intermediate
// processing events with a growing percentage.
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
				if run[i] <= run[i-1] {
					t.Fatalf("progress not increasing within an attempt: %v", runs)
				}
			}
		}
		t.Logf("progress events per attempt: %v", runs)
	})
}
