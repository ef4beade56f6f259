package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A finish whose reply is lost though Redis ran it (the read timed out, the
// client does not resend by itself) is written again by the pool with the
// same token: that attempt is answered as the first was, so the job is
// counted as done, with one terminal event. Before, the second attempt was
// refused as already finished and the job was not counted at all.
func TestFinishRetriedAfterLostReplyIsCounted(t *testing.T) {
	testsvc.EachRedis(t, testFinishRetriedAfterLostReplyIsCounted)
}

func testFinishRetriedAfterLostReplyIsCounted(t *testing.T) {
	rdb, st, opts := newRedis(t)
	ctx := context.Background()
	proxy := testsvc.NewLateProxy(t, opts.Addr)
	po := *opts
	po.Addr = proxy.Addr()
	po.MaxRetries = -1
	po.ReadTimeout = 300 * time.Millisecond
	via := redis.NewClient(&po)
	t.Cleanup(func() { _ = via.Close() })
	release := make(chan struct{})
	be := backend.NewRegistry(map[string]backend.Backend{"chat": backend.Func(func(ctx context.Context, _ backend.Request, _ backend.Delta) (json.RawMessage, error) {
		select {
		case <-release:
			return json.RawMessage(`{"ok":true}`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})})
	logs := &testsvc.LogBuffer{}
	p, err := New(slog.New(slog.NewJSONHandler(logs, nil)), via, jobs.NewStore(via), "lost-reply", testSettings(), be)
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
	waitStatus(t, st, id, jobs.Running, 5*time.Second)

	proxy.Arm(StepFinish, time.Second)
	close(release)

	if j := waitTerminal(t, st, id, 5*time.Second); j.Status != jobs.Done {
		t.Fatalf("job %s", j.Status)
	}
	waitNoPending(t, rdb, 5*time.Second)
	for deadline := time.Now().Add(5 * time.Second); len(p.tracked()) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("job still tracked")
		}
	}
	if proxy.Held() != 1 {
		t.Fatalf("the finish's reply was not held back")
	}
	if n := terminalCount(eventTypes(t, st, id)); n != 1 {
		t.Errorf("%d terminal events", n)
	}
	if got := finishedCounts(t, reg); got["chat/done"] != 1 || len(got) != 1 {
		t.Errorf("finished = %v, want chat/done 1\n%s", got, logs)
	}
}
