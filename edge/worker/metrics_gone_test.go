package worker

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// euterpe_edge_jobs_finished_total counts the jobs this process finished.
// A running job that ends without it — finished by another consumer that
// ran it too, or expired — is stopped and its message acknowledged like a
// cancelled job's, but it is no job this process cancelled: before, the
// status poll and a refused delta counted it as canceled. A cancelled job
// is counted as canceled, whichever of the two finds it.
func TestJobEndedElsewhereNotCounted(t *testing.T) {
	testsvc.EachRedis(t, testJobEndedElsewhereNotCounted)
}

func testJobEndedElsewhereNotCounted(t *testing.T) {
	ctx := context.Background()
	finishElsewhere := func(st *jobs.Store, id string) error {
		_, err := st.Finish(ctx, id, jobs.Done, "elsewhere", json.RawMessage(`{}`), nil, "")
		return err
	}
	cancelSilently := func(st *jobs.Store, id string) error {
		// No publish, so that the poll or the delta finds it.
		_, err := st.Apply(ctx, id, jobs.Transition{To: jobs.Canceled, Step: "gateway.cancel"})
		return err
	}
	expire := func(st *jobs.Store, id string) error {
		return st.Redis().Del(ctx, jobs.JobKey(id), jobs.EventsKey(id)).Err()
	}
	tests := []struct {
		name string
		end  func(st *jobs.Store, id string) error
		// byDelta: the job's next delta finds it ended; else the status
		// poll does.
		byDelta bool
		want    map[string]float64
	}{
		{"finished elsewhere, found by the poll", finishElsewhere, false, map[string]float64{}},
		{"expired, found by the poll", expire, false, map[string]float64{}},
		{"cancelled, found by the poll", cancelSilently, false, map[string]float64{"chat/canceled": 1}},
		{"finished elsewhere, found by a delta", finishElsewhere, true, map[string]float64{}},
		{"expired, found by a delta", expire, true, map[string]float64{}},
		{"cancelled, found by a delta", cancelSilently, true, map[string]float64{"chat/canceled": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rdb, st, _ := newRedis(t)
			s := testSettings()
			if tc.byDelta {
				s.CancelPoll = time.Hour
			}
			started, stream := make(chan string, 1), make(chan struct{})
			be := backend.NewRegistry(map[string]backend.Backend{"chat": backend.Func(func(ctx context.Context, req backend.Request, delta backend.Delta) (json.RawMessage, error) {
				started <- req.JobID
				select {
				case <-stream:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				for ctx.Err() == nil {
					delta("x")
					time.Sleep(5 * time.Millisecond)
				}
				return nil, ctx.Err()
			})})
			p, err := New(nil, rdb, st, "counting", s, be)
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			if err := p.RegisterMetrics(reg); err != nil {
				t.Fatal(err)
			}
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			defer func() { cancel(); <-done }()
			id := create(t, st, "chat", `{}`)
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("job not started")
			}

			if err := tc.end(st, id); err != nil {
				t.Fatal(err)
			}
			if tc.byDelta {
				close(stream)
			}

			waitNoPending(t, rdb, 5*time.Second)
			// The count comes after the acknowledgement, before the job
			// is forgotten.
			for deadline := time.Now().Add(2 * time.Second); len(p.tracked()) > 0; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("job still tracked")
				}
			}
			if got := finishedCounts(t, reg); !maps.Equal(got, tc.want) {
				t.Errorf("finished = %v, want %v", got, tc.want)
			}
		})
	}
}
