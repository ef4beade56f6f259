package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A worker runs at most Concurrency jobs at once, on at most Concurrency
// goroutines it keeps between jobs, runs every job of a backlog several
// times its size, and leaves no goroutine of its own behind once Run
// returns.
func TestWorkerRunsJobsOnItsOwnGoroutines(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		const conc, n = 3, 12
		f := newFixture(t, db, nil)
		var running, most, runs atomic.Int64
		var mu sync.Mutex
		goroutines := map[uint64]bool{}
		f.register(t, "held", StageFunc{StageName: "storage", Fn: func(ctx context.Context, m JobMessage, in any) (any, error) {
			now := running.Add(1)
			defer running.Add(-1)
			for {
				old := most.Load()
				if now <= old || most.CompareAndSwap(old, now) {
					break
				}
			}
			mu.Lock()
			goroutines[goroutineID()] = true
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // long enough for the others to be claimed meanwhile
			runs.Add(1)
			return nil, nil
		}})
		for i := range n {
			f.submit(t, "held", "S", fmt.Sprintf("2024-01-%02d", i+1))
		}
		before := numGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		w := NewWorker(f.store, f.types, WorkerConfig{ID: "w", Visibility: 30 * time.Second, Concurrency: conc, Poll: 10 * time.Millisecond})
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(ctx) }()
		waitFor(t, 20*time.Second, "every job run", func() bool { return runs.Load() == n })
		cancel()
		<-done

		assert.Equal(t, int64(conc), most.Load(), "jobs at once")
		mu.Lock()
		assert.LessOrEqual(t, len(goroutines), conc, "goroutines the jobs ran on")
		mu.Unlock()
		deadline := time.Now().Add(5 * time.Second)
		for numGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if after := numGoroutine(); after > before {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines after Run: %d, before it %d\n%s", after, before, buf[:runtime.Stack(buf, true)])
		}
	})
}

// goroutineID is the id of the calling goroutine, from its stack's header
// ("goroutine 42 [running]:").
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

func numGoroutine() int { return runtime.NumGoroutine() }
