package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// testSettings are fast: short idle, claim and poll periods.
func testSettings() Settings {
	s := DefaultSettings()
	s.Concurrency = 4
	s.Batch = 16
	s.ClaimIdle = 600 * time.Millisecond
	s.ClaimInterval = 100 * time.Millisecond
	s.CancelPoll = 200 * time.Millisecond
	s.DeltaInterval = 50 * time.Millisecond
	s.Block = 100 * time.Millisecond
	s.Drain = 200 * time.Millisecond
	return s
}

func newRedis(t testing.TB) (*redis.Client, *jobs.Store, *redis.Options) {
	rdb, opts := testsvc.Redis(t)
	st := jobs.NewStore(rdb)
	if err := st.EnsureGroup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rdb, st, opts
}

// startPool runs a pool until the test ends.
func startPool(t testing.TB, rdb *redis.Client, st *jobs.Store, consumer string, s Settings, be backend.Backend) *Pool {
	t.Helper()
	return startPoolLog(t, nil, rdb, st, consumer, s, be)
}

// startPoolLog is startPool logging to log.
func startPoolLog(t testing.TB, log *slog.Logger, rdb *redis.Client, st *jobs.Store, consumer string, s Settings, be backend.Backend) *Pool {
	t.Helper()
	p, err := New(log, rdb, st, consumer, s, be)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("pool.Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("pool did not stop")
		}
	})
	return p
}

func create(t testing.TB, st *jobs.Store, task, payload string) string {
	t.Helper()
	c, err := st.Create(context.Background(), jobs.NewJob{Task: task, Payload: json.RawMessage(payload), TTL: 600})
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// waitTerminal waits for the job to reach a terminal status and returns it.
func waitTerminal(t testing.TB, st *jobs.Store, id string, within time.Duration) *jobs.Job {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := st.Get(context.Background(), id)
		if err != nil && !errors.Is(err, jobs.ErrNotFound) {
			t.Fatal(err)
		}
		if j != nil && jobs.IsTerminal(j.Status) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not finished after %v (status %v)", id, within, j)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitStatus(t testing.TB, st *jobs.Store, id, status string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := st.Get(context.Background(), id)
		if err == nil && j.Status == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never reached %s (last %v, %v)", id, status, j, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func eventTypes(t testing.TB, st *jobs.Store, id string) []string {
	t.Helper()
	evs, err := st.Events(context.Background(), id, "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func terminalCount(types []string) int {
	n := 0
	for _, ty := range types {
		if jobs.IsTerminal(ty) {
			n++
		}
	}
	return n
}

// waitNoPending waits until jobs:stream has no pending (unacknowledged) entries.
func waitNoPending(t testing.TB, rdb *redis.Client, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		p, err := rdb.XPending(context.Background(), jobs.QueueStream, jobs.Group).Result()
		if err != nil {
			t.Fatal(err)
		}
		if p.Count == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d messages still pending", p.Count)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func errorCode(t testing.TB, j *jobs.Job) backend.Error {
	t.Helper()
	var e backend.Error
	if err := json.Unmarshal(j.Error, &e); err != nil {
		t.Fatalf("error field %s: %v", j.Error, err)
	}
	return e
}

// waitDelivered waits until the group has delivered every queue entry:
// at least one was delivered and none follows the last delivered id
// (finished entries are deleted, so the stream's last entry may be gone).
func waitDelivered(t testing.TB, rdb *redis.Client, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		groups := rdb.XInfoGroups(ctx, jobs.QueueStream).Val()
		if len(groups) == 1 && groups[0].LastDeliveredID != "0-0" {
			next := jobs.MustStreamID(groups[0].LastDeliveredID).Next().String()
			if rest, err := rdb.XRangeN(ctx, jobs.QueueStream, next, "+", 1).Result(); err == nil && len(rest) == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue not delivered: groups %+v", groups)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finishedCounts reads euterpe_edge_jobs_finished_total by "task/status".
func finishedCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "euterpe_edge_jobs_finished_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["task"]+"/"+labels["status"]] += m.GetCounter().GetValue()
		}
	}
	return got
}
