package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A command whose reply comes after the client's read timeout has run
// once in Redis, and the client (go-redis retries by default) sends it
// again. Each write of the store runs its script a second time then, and
// must write once and answer as the first run did: before, a create
// queued its job twice (two "queued" events, two queue entries: the job
// ran twice), a delta's text was written twice, a start wrote a second
// "running", and a finish or cancel was refused (ErrFinished) although it
// had happened.
func TestResentWriteAppliesOnce(t *testing.T) { testsvc.EachRedis(t, testResentWriteAppliesOnce) }

func testResentWriteAppliesOnce(t *testing.T) {
	ctx := context.Background()
	batch := func(st *jobs.Store, ops ...jobs.Op) ([]string, error) {
		var ids []string
		for i, r := range st.ApplyBatch(ctx, ops) {
			if r.Err != nil {
				return nil, fmt.Errorf("op %d: %w", i, r.Err)
			}
			ids = append(ids, r.EventID)
		}
		return ids, nil
	}
	one := func(id string, err error) ([]string, error) { return []string{id}, err }
	tests := []struct {
		name  string
		setup func(t *testing.T, st *jobs.Store, rdb *redis.Client) job
		// write returns the event ids it was answered, one per type of
		// evTypes.
		write   func(st *jobs.Store, j *job) ([]string, error)
		evTypes []string
	}{
		{"create", nil, func(st *jobs.Store, j *job) ([]string, error) {
			c, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{"q":1}`), TTL: 60})
			j.id, j.msgID = c.ID, c.MessageID
			return one(c.EventID, err)
		}, []string{jobs.Queued}},
		{"create with idempotency key", nil, func(st *jobs.Store, j *job) ([]string, error) {
			c, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{"q":1}`), TTL: 60,
				IdempotencyKey: "k", Fingerprint: "f"})
			if err == nil && c.Duplicate {
				err = errors.New("answered as a duplicate of itself")
			}
			j.id, j.msgID = c.ID, c.MessageID
			return one(c.EventID, err)
		}, []string{jobs.Queued}},
		{"start in a batch", queuedJob, func(st *jobs.Store, j *job) ([]string, error) {
			return batch(st, jobs.Op{ID: j.id, T: jobs.Transition{To: jobs.Running, Step: "worker.start"}})
		}, []string{jobs.Running}},
		{"delta", runningJob, func(st *jobs.Store, j *job) ([]string, error) {
			return one(st.AppendEvent(ctx, j.id, "delta", "worker.stream", json.RawMessage(`{"text":"hello "}`)))
		}, []string{"delta"}},
		{"finish in a batch", runningJob, func(st *jobs.Store, j *job) ([]string, error) {
			return batch(st, jobs.Op{ID: j.id, T: jobs.Transition{To: jobs.Done, Step: "worker.finish",
				Result: json.RawMessage(`{"text":"hi"}`), AckMessageID: j.msgID}})
		}, []string{jobs.Done}},
		{"cancel", runningJob, func(st *jobs.Store, j *job) ([]string, error) {
			return one(st.Cancel(ctx, j.id, "gateway.cancel", "by client"))
		}, []string{jobs.Canceled}},
		{"ops of one job in a batch", queuedJob, func(st *jobs.Store, j *job) ([]string, error) {
			return batch(st,
				jobs.Op{ID: j.id, T: jobs.Transition{To: jobs.Running, Step: "worker.start"}},
				jobs.Op{ID: j.id, T: jobs.Transition{EventType: "progress", Step: "worker.stream"}},
				jobs.Op{ID: j.id, T: jobs.Transition{EventType: "delta", Step: "worker.stream", Data: json.RawMessage(`{"text":"a"}`)}},
				jobs.Op{ID: j.id, T: jobs.Transition{To: jobs.Done, Step: "worker.finish", Result: json.RawMessage(`{}`)}})
		}, []string{jobs.Running, "progress", "delta", jobs.Done}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rdb, opts := testsvc.Redis(t)
			require.NoError(t, jobs.NewStore(rdb).EnsureGroup(ctx))
			proxy := testsvc.NewLateProxy(t, opts.Addr)
			po := *opts
			po.Addr = proxy.Addr()
			po.ReadTimeout = 200 * time.Millisecond
			via := redis.NewClient(&po)
			t.Cleanup(func() { _ = via.Close() })
			st := jobs.NewStore(via)
			// Load both scripts through the proxy, so that the write
			// below is one EVALSHA and no NOSCRIPT answer is held back.
			warm := create(t, st)
			_, err := st.SetRunning(ctx, warm, "warm", nil)
			require.NoError(t, err)
			var j job
			if tc.setup != nil {
				j = tc.setup(t, st, rdb)
			}

			proxy.Arm("EVAL", 600*time.Millisecond)
			answered, err := tc.write(st, &j)

			require.NoError(t, err)
			require.GreaterOrEqual(t, proxy.Matched(), 2, "the script was sent again")
			var written []string
			for _, typ := range tc.evTypes {
				for _, m := range rdb.XRange(ctx, jobs.EventsKey(j.id), "-", "+").Val() {
					if m.Values["type"] == typ {
						written = append(written, m.ID)
					}
				}
			}
			assert.Equal(t, answered, written, "one event of each type %v, the one answered", tc.evTypes)
			if tc.evTypes[0] != jobs.Queued {
				return
			}
			var entries []string
			for _, m := range rdb.XRange(ctx, jobs.QueueStream, "-", "+").Val() {
				if m.Values["job_id"] == j.id {
					entries = append(entries, m.ID)
				}
			}
			assert.Equal(t, []string{j.msgID}, entries, "one queue entry, the one answered")
		})
	}
}

// job is a job the write under test is made to.
type job struct{ id, msgID string }

func queuedJob(t *testing.T, st *jobs.Store, _ *redis.Client) job {
	t.Helper()
	c, err := st.Create(context.Background(), jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)
	return job{c.ID, c.MessageID}
}

// runningJob is a started job whose queue message this test's consumer
// holds, as a worker's.
func runningJob(t *testing.T, st *jobs.Store, rdb *redis.Client) job {
	t.Helper()
	ctx := context.Background()
	j := queuedJob(t, st, rdb)
	var msgID string
	for _, m := range readGroup(t, rdb, 100) {
		if m.Values["job_id"] == j.id {
			msgID = m.ID
		}
	}
	require.NotEmpty(t, msgID)
	_, err := st.SetRunning(ctx, j.id, "worker.start", nil)
	require.NoError(t, err)
	j.msgID = msgID
	return j
}
