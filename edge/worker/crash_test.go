package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// childEnv selects the worker-process role of the test binary; its value is
// the Redis address, and EUTERPE_CHILD_DB the logical database.
const childEnv = "EUTERPE_WORKER_CHILD_REDIS"

// runChild is a worker process with a backend that never finishes on its
// own: the parent kills it with SIGKILL while the job runs.
func runChild() int {
	db, _ := strconv.Atoi(os.Getenv("EUTERPE_CHILD_DB"))
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(childEnv), DB: db, Password: os.Getenv("EUTERPE_CHILD_PASSWORD")})
	s := testSettings()
	slow := backend.Func(func(ctx context.Context, r backend.Request, _ backend.Delta) (json.RawMessage, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Minute):
			return json.RawMessage(`{"by":"child"}`), nil
		}
	})
	p, err := New(nil, rdb, jobs.NewStore(rdb), "doomed", s, backend.NewRegistry(map[string]backend.Backend{"chat": slow}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_ = p.Run(ctx)
	return 0
}

func TestWorkerKilledMidJobIsRecovered(t *testing.T) {
	testsvc.EachRedis(t, testWorkerKilledMidJobIsRecovered)
}

func testWorkerKilledMidJobIsRecovered(t *testing.T) {
	rdb, st, opts := newRedis(t)
	id := create(t, st, "chat", `{"prompt":"long"}`)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+opts.Addr, "EUTERPE_CHILD_DB="+strconv.Itoa(opts.DB), "EUTERPE_CHILD_PASSWORD="+opts.Password)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	waitStatus(t, st, id, jobs.Running, 10*time.Second)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	pend := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group, Start: "-", End: "+", Count: 10}).Val()
	if len(pend) != 1 || pend[0].Consumer != "doomed" {
		t.Fatalf("pending after kill = %+v", pend)
	}

	startPool(t, rdb, st, "survivor", testSettings(), backend.NewRegistry(map[string]backend.Backend{
		"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
			return json.RawMessage(`{"by":"survivor"}`), nil
		}),
	}))
	j := waitTerminal(t, st, id, 10*time.Second)
	if j.Status != jobs.Done || string(j.Result) != `{"by":"survivor"}` {
		t.Fatalf("job %s result %s", j.Status, j.Result)
	}
	waitNoPending(t, rdb, 2*time.Second)
	types := eventTypes(t, st, id)
	if terminalCount(types) != 1 || types[len(types)-1] != "done" {
		t.Fatalf("events = %v, want exactly one terminal event", types)
	}
}
