package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// §8 job_latency_p95: every job that ends — succeeded, failed for good, or
// dead-lettered, whether by its worker's failures or by lost leases (a
// worker that died) — is one observation of the latency histogram under
// the status it ended in.
func TestJobLatencyObservedForEveryEnd(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		byWorker := func(status string) func(t *testing.T, f *fixture, _ *clock, id string) {
			return func(t *testing.T, f *fixture, _ *clock, id string) {
				f.runUntil(t, time.Second, status, func() bool { return f.get(t, id).Status == status })
			}
		}
		for i, tt := range []struct {
			name     string
			stage    Stage // the job type's one stage
			fakeTime bool
			status   string
			// end takes the submitted job to status.
			end func(t *testing.T, f *fixture, clk *clock, jobID string)
		}{
			{"succeeded", stage("storage", "s3://b/k", nil, nil), false, StatusSucceeded, byWorker(StatusSucceeded)},
			{"failed", stage("quality", nil, Fail(CodeQualityFailed, "bad data"), nil), false, StatusFailed, byWorker(StatusFailed)},
			{"dead-lettered by failures", stage("storage", nil, Fail(CodeStorageWriteFailed, "bucket said 503"), nil), false,
				StatusDeadLetter, byWorker(StatusDeadLetter)},
			{"dead-lettered by lost leases", stage("storage", "s3://b/k", nil, nil), true, StatusDeadLetter,
				func(t *testing.T, f *fixture, clk *clock, id string) {
					for attempt := 1; attempt <= f.store.MaxAttempts; attempt++ {
						if jobs, err := f.store.Claim(ctx, "w1", 1, 30*time.Second); err != nil || len(jobs) != 1 {
							t.Fatalf("attempt %d: claim %v %d", attempt, err, len(jobs))
						}
						clk.Add(31 * time.Second)
					}
					if n, err := f.store.Reclaim(ctx, 10); err != nil || n != 1 {
						t.Fatalf("reclaim %d %v", n, err)
					}
					if s := f.get(t, id).Status; s != StatusDeadLetter {
						t.Fatalf("status %s after %d lost leases", s, f.store.MaxAttempts)
					}
				}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				var clk *clock
				var now func() time.Time
				if tt.fakeTime {
					clk = newClock(time.Now())
					now = clk.Now
				}
				f := newFixture(t, db, now)
				f.store.MaxAttempts = 2
				f.store.Metrics = NewMetrics(prometheus.NewRegistry(), f.store)
				f.register(t, "prices", tt.stage)
				c := f.submit(t, "prices", "AAPL", fmt.Sprintf("2026-01-%02d", i+1))
				tt.end(t, f, clk, c.JobID)
				if n := histogramCount(t, f.store.Metrics.Duration.WithLabelValues("prices", tt.status).(prometheus.Metric)); n != 1 {
					t.Fatalf("%d latency observations of %s, want 1", n, tt.status)
				}
			})
		}
	})
}

func histogramCount(t testing.TB, h prometheus.Metric) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
