package worker

import (
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Shutdown lets a running job that ends within the drain write its result,
// leaves one that does not pending (running, unacknowledged) for recovery,
// and returns with every goroutine of the pool stopped.
func TestShutdownDrainsThenReleases(t *testing.T) {
	testsvc.EachRedis(t, testShutdownDrainsThenReleases)
}

func testShutdownDrainsThenReleases(t *testing.T) {
	rdb, st, _ := newRedis(t)
	ctx := context.Background()
	s := testSettings()
	// The quick job needs a few milliseconds of it; the rest is room for
	// a busy machine. Without a drain it is left running too.
	s.Drain = 3 * time.Second
	started := make(chan string, 2)
	stopping := make(chan struct{})
	be := backend.NewRegistry(map[string]backend.Backend{
		"chat": backend.Func(func(ctx context.Context, r backend.Request, delta backend.Delta) (json.RawMessage, error) {
			started <- r.JobID
			<-stopping
			delta("last words")
			time.Sleep(100 * time.Millisecond)
			return json.RawMessage(`{"drained":true}`), nil
		}),
		"code": backend.Func(func(ctx context.Context, r backend.Request, _ backend.Delta) (json.RawMessage, error) {
			started <- r.JobID
			<-ctx.Done()
			return nil, ctx.Err()
		}),
	})
	before := runtime.NumGoroutine()
	p, err := New(nil, rdb, st, "w-stop", s, be)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	quick := create(t, st, "chat", `{}`)
	long := create(t, st, "code", `{}`)
	<-started
	<-started
	stop()
	close(stopping)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("pool did not stop")
	}

	if j, _ := st.Get(ctx, quick); j.Status != jobs.Done || string(j.Result) != `{"drained":true}` {
		t.Fatalf("drained job: %+v", j)
	}
	if types := eventTypes(t, st, quick); types[len(types)-2] != "delta" || types[len(types)-1] != "done" {
		t.Fatalf("drained job events = %v", types)
	}
	if j, _ := st.Get(ctx, long); j.Status != jobs.Running {
		t.Fatalf("released job: %+v", j)
	}
	if types := eventTypes(t, st, long); terminalCount(types) != 0 {
		t.Fatalf("released job events = %v", types)
	}
	pend := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group, Start: "-", End: "+", Count: 10}).Val()
	if len(pend) != 1 || pend[0].Consumer != "w-stop" {
		t.Fatalf("pending after shutdown = %+v", pend)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
