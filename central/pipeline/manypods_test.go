package pipeline

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Several pods (a store and a worker each, on its own database handle)
// submit the same days at once and work the queue together: each (type,
// symbol, asof) gets one job, and each job runs once and succeeds.
func TestPodsShareTheQueue(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		const pods, days = 3, 20
		var mu sync.Mutex
		runs := map[string]int{}
		var fixtures []*fixture
		for p := 0; p < pods; p++ {
			h, err := sqldb.Open(ctx, dbURL(t, db), "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close() })
			f := newFixture(t, h, nil)
			f.register(t, "daily", StageFunc{StageName: "storage", Fn: func(_ context.Context, m JobMessage, _ any) (any, error) {
				mu.Lock()
				runs[m.JobID]++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				return "s3://bucket/" + m.Asof, nil
			}})
			fixtures = append(fixtures, f)
		}
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for p, f := range fixtures {
			w := NewWorker(f.store, f.types, WorkerConfig{ID: fmt.Sprint("pod", p), Visibility: 30 * time.Second, Concurrency: 4, Poll: 10 * time.Millisecond})
			wg.Add(1)
			go func() { defer wg.Done(); _ = w.Run(wctx) }()
		}
		ids := make([]map[string]bool, days)
		var smu sync.Mutex
		var sg sync.WaitGroup
		for _, f := range fixtures {
			sg.Add(1)
			go func() {
				defer sg.Done()
				for d := 0; d < days; d++ {
					c, err := f.store.Submit(ctx, Request{JobType: "daily", Symbol: "AAPL", Asof: fmt.Sprintf("2028-02-%02d", d+10), RequestedBy: "test"})
					if err != nil {
						t.Errorf("submit: %v", err)
						return
					}
					smu.Lock()
					if ids[d] == nil {
						ids[d] = map[string]bool{}
					}
					ids[d][c.JobID] = true
					smu.Unlock()
				}
			}()
		}
		sg.Wait()
		waitFor(t, 30*time.Second, "every job to succeed", func() bool {
			var n int
			_ = db.QueryRowContext(ctx, db.Rebind("SELECT COUNT(*) FROM pipeline_jobs WHERE status = ?"), StatusSucceeded).Scan(&n)
			return n == days
		})
		stop()
		wg.Wait()
		for d, m := range ids {
			if len(m) != 1 {
				t.Errorf("day %d: %d jobs %v", d, len(m), m)
			}
		}
		var total int
		_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pipeline_jobs").Scan(&total)
		if total != days {
			t.Errorf("%d jobs stored, want %d", total, days)
		}
		for id, n := range runs {
			if n != 1 {
				t.Errorf("job %s ran %d times", id, n)
			}
		}
		if len(runs) != days {
			t.Errorf("%d jobs ran, want %d", len(runs), days)
		}
	})
}
