package worker

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// BenchmarkBurnDown enqueues EUTERPE_BENCH_JOBS jobs (default 50,000)
// through jobs.Store.Create, then times a pool with an instant backend
// draining them all (every job running, done, terminal event, XACK) on the
// real Redis, and reports jobs/s.
func BenchmarkBurnDown(b *testing.B) {
	n := 50_000
	if v, err := strconv.Atoi(os.Getenv("EUTERPE_BENCH_JOBS")); err == nil && v > 0 {
		n = v
	}
	conc := 128
	if v, err := strconv.Atoi(os.Getenv("EUTERPE_BENCH_WORKERS")); err == nil && v > 0 {
		conc = v
	}
	rdb, st, _ := newRedis(b)
	ctx := context.Background()
	var total, redisCPU time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		if err := st.EnsureGroup(ctx); err != nil {
			b.Fatal(err)
		}
		enqueue(b, st, n)
		var ran atomic.Int64
		s := DefaultSettings()
		s.Concurrency = conc
		s.Batch = 256
		be := backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
			ran.Add(1)
			return json.RawMessage(`{"ok":true}`), nil
		})
		p, err := New(nil, rdb, st, "bench", s, backend.NewRegistry(map[string]backend.Backend{"chat": be}))
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		b.StartTimer()
		cpu0 := redisCPUTime(b, rdb)
		start := time.Now()
		go func() { defer close(done); _ = p.Run(runCtx) }()
		for {
			if ran.Load() >= int64(n) && rdb.XPending(ctx, jobs.QueueStream, jobs.Group).Val().Count == 0 {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		elapsed := time.Since(start)
		redisCPU += redisCPUTime(b, rdb) - cpu0
		b.StopTimer()
		total += elapsed
		stop()
		<-done
	}
	b.ReportMetric(float64(n)*float64(b.N)/total.Seconds(), "jobs/s")
	// Redis's one thread bounds the drain; its CPU per job moves far less
	// between runs than jobs/s does on a shared machine.
	b.ReportMetric(float64(redisCPU.Microseconds())/float64(n*b.N), "redis-cpu-µs/job")
	b.ReportMetric(0, "ns/op")
}

// redisCPUTime is the CPU time Redis has used, its main thread's where
// INFO tells it apart (Redis 6.2 and later).
func redisCPUTime(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.InfoMap(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	cpu := info["CPU"]
	user, sys := "used_cpu_user", "used_cpu_sys"
	if _, ok := cpu[user+"_main_thread"]; ok {
		user, sys = user+"_main_thread", sys+"_main_thread"
	}
	u, errU := strconv.ParseFloat(cpu[user], 64)
	s, errS := strconv.ParseFloat(cpu[sys], 64)
	if err := errors.Join(errU, errS); err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}
	return time.Duration((u + s) * float64(time.Second))
}

// enqueue creates n chat jobs from 32 concurrent callers of Store.Create.
func enqueue(b *testing.B, st *jobs.Store, n int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := st.Create(context.Background(), jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{"prompt":"x"}`), TTL: 600}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
