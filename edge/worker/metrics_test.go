package worker

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A queue message's task is whatever its writer put there: the gateway
// only enqueues the contract's tasks, but any client of Redis can XADD.
// Used as a metric label as it is, a task that is not UTF-8 makes the
// Prometheus client panic (the whole process goes down after writing the
// job's outcome, again at each delivery of a message like it), and every
// other unknown name would add series without bound.
func TestMetricsTaskLabelBounded(t *testing.T) { testsvc.EachRedis(t, testMetricsTaskLabelBounded) }

func testMetricsTaskLabelBounded(t *testing.T) {
	rdb, st, _ := newRedis(t)
	ctx := context.Background()
	p, err := New(nil, rdb, st, "metrics", testSettings(), backend.NewRegistry(nil))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := p.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range []string{"\xff\xfe", "no-such-task", "chat"} {
		id := uuid.NewString()
		now := itoa(time.Now().UnixMilli())
		if err := rdb.HSet(ctx, jobs.JobKey(id), "job_id", id, "task", task, "payload", "{}", "status", jobs.Queued,
			"created_ts", now, "updated_ts", now, "ttl_s", "600", "result", "", "error", "").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobs.QueueStream, Values: []any{"job_id", id, "task", task, "payload", "{}"}}).Err(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	for _, id := range ids {
		if j := waitTerminal(t, st, id, 5*time.Second); j.Status != jobs.Error {
			t.Fatalf("job %s: %s", id, j.Status)
		}
	}
	waitNoPending(t, rdb, 2*time.Second)
	got := finishedCounts(t, reg)
	want := map[string]float64{"chat/error": 1, "unknown/error": 2}
	if !maps.Equal(got, want) {
		t.Fatalf("finished = %v, want %v", got, want)
	}
}
