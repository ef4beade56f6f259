package peers

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// BenchmarkAsynq enqueues EUTERPE_BENCH_JOBS (default 50,000, like the
// edge burn-down) tasks from 32 concurrent callers, then times a server
// with EUTERPE_BENCH_WORKERS handlers (default 128, the edge's) draining
// them with a no-op handler until the queue holds nothing pending or
// active, on the same private Redis as the edge benchmark.
func BenchmarkAsynq(b *testing.B) {
	jobs := envInt("EUTERPE_BENCH_JOBS", 50000)
	conc := envInt("EUTERPE_BENCH_WORKERS", 128)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_, opts := testsvc.Redis(b)
		ropt := asynq.RedisClientOpt{Addr: opts.Addr, DB: opts.DB, Password: opts.Password, Username: opts.Username}
		client := asynq.NewClient(ropt)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for next.Add(1) <= int64(jobs) {
					if _, err := client.Enqueue(asynq.NewTask("noop", []byte(`{"prompt":"x"}`))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		_ = client.Close()
		var ran atomic.Int64
		mux := asynq.NewServeMux()
		mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
			ran.Add(1)
			return nil
		})
		srv := asynq.NewServer(ropt, asynq.Config{Concurrency: conc, LogLevel: asynq.FatalLevel})
		insp := asynq.NewInspector(ropt)
		b.StartTimer()
		start := time.Now()
		if err := srv.Start(mux); err != nil {
			b.Fatal(err)
		}
		for {
			if ran.Load() >= int64(jobs) {
				q, err := insp.GetQueueInfo("default")
				if err != nil {
					b.Fatal(err)
				}
				if q.Pending == 0 && q.Active == 0 {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		total += time.Since(start)
		b.StopTimer()
		srv.Shutdown()
		_ = insp.Close()
	}
	report(b, jobs, total)
}
