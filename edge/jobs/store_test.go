package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func newStore(t *testing.T) (*jobs.Store, *redis.Client) {
	t.Helper()
	rdb, _ := testsvc.Redis(t)
	return jobs.NewStore(rdb), rdb
}

func create(t *testing.T, st *jobs.Store) string {
	t.Helper()
	c, err := st.Create(context.Background(), jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{"q":"hi"}`), TTL: 60})
	require.NoError(t, err)
	return c.ID
}

func TestCreateWritesContractKeys(t *testing.T) { testsvc.EachRedis(t, testCreateWritesContractKeys) }

func testCreateWritesContractKeys(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	c, err := st.Create(ctx, jobs.NewJob{Task: "plan", Payload: json.RawMessage(`{"a":1}`), TTL: 120})
	require.NoError(t, err)

	h := rdb.HGetAll(ctx, "job:"+c.ID).Val()
	assert.Equal(t, c.ID, h["job_id"])
	assert.Equal(t, "plan", h["task"])
	assert.Equal(t, `{"a":1}`, h["payload"])
	assert.Equal(t, "queued", h["status"])
	assert.Equal(t, "120", h["ttl_s"])
	assert.Equal(t, h["created_ts"], h["updated_ts"])
	assert.Contains(t, h, "result")
	assert.Contains(t, h, "error")
	assert.InDelta(t, 120, rdb.TTL(ctx, "job:"+c.ID).Val().Seconds(), 2)
	assert.InDelta(t, 120, rdb.TTL(ctx, "job:"+c.ID+":events").Val().Seconds(), 2)

	evs := rdb.XRange(ctx, "job:"+c.ID+":events", "-", "+").Val()
	require.Len(t, evs, 1)
	assert.Equal(t, map[string]any{"type": "queued", "ts": h["created_ts"], "step": "gateway.enqueue", "data": "{}"}, evs[0].Values)
	assert.Equal(t, c.EventID, evs[0].ID)

	q := rdb.XRange(ctx, "jobs:stream", "-", "+").Val()
	require.Len(t, q, 1)
	assert.Equal(t, map[string]any{"job_id": c.ID, "task": "plan", "payload": `{"a":1}`}, q[0].Values)

	j, err := st.Get(ctx, c.ID)
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":1}`, string(j.Payload))
	assert.Nil(t, j.Result)
	assert.Equal(t, jobs.Queued, j.Status)
}

func TestGetMissingAndRaw(t *testing.T) { testsvc.EachRedis(t, testGetMissingAndRaw) }

func testGetMissingAndRaw(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	_, err := st.Get(ctx, "nope")
	assert.ErrorIs(t, err, jobs.ErrNotFound)

	id := create(t, st)
	rdb.HSet(ctx, jobs.JobKey(id), "result", "not json")
	j, err := st.Get(ctx, id)
	require.NoError(t, err)
	assert.JSONEq(t, `{"_raw":"not json"}`, string(j.Result))
}

func TestIdempotency(t *testing.T) { testsvc.EachRedis(t, testIdempotency) }

func testIdempotency(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	nj := jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: "k1", Fingerprint: "f1"}
	a, err := st.Create(ctx, nj)
	require.NoError(t, err)
	b, err := st.Create(ctx, nj)
	require.NoError(t, err)
	assert.Equal(t, a.ID, b.ID)
	assert.True(t, b.Duplicate)

	nj.Fingerprint = "f2"
	_, err = st.Create(ctx, nj)
	assert.ErrorIs(t, err, jobs.ErrIdempotencyConflict)
	assert.EqualValues(t, 1, rdb.XLen(ctx, jobs.QueueStream).Val())

	// Concurrent requests with one new key create exactly one job.
	nj.IdempotencyKey, nj.Fingerprint = "k2", "f"
	var wg sync.WaitGroup
	ids := make(chan string, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := st.Create(ctx, nj)
			assert.NoError(t, err)
			ids <- c.ID
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	assert.Len(t, seen, 1)
	assert.EqualValues(t, 2, rdb.XLen(ctx, jobs.QueueStream).Val())
}

func TestTransitionsTable(t *testing.T) { testsvc.EachRedis(t, testTransitionsTable) }

func testTransitionsTable(t *testing.T) {
	tests := []struct {
		name    string
		steps   []jobs.Status
		to      jobs.Status
		wantErr error
	}{
		{"queued to running", nil, jobs.Running, nil},
		{"running to done", []jobs.Status{jobs.Running}, jobs.Done, nil},
		{"reclaimed running to running", []jobs.Status{jobs.Running}, jobs.Running, nil},
		{"queued to done is invalid", nil, jobs.Done, lease.ErrInvalidTransition},
		{"done to running is finished", []jobs.Status{jobs.Running, jobs.Done}, jobs.Running, jobs.ErrFinished},
		{"canceled to done is finished", []jobs.Status{jobs.Canceled}, jobs.Done, jobs.ErrFinished},
		{"error to canceled is finished", []jobs.Status{jobs.Error}, jobs.Canceled, jobs.ErrFinished},
	}
	st, _ := newStore(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := create(t, st)
			for _, s := range tt.steps {
				_, err := st.Apply(ctx, id, jobs.Transition{To: s})
				require.NoError(t, err)
			}
			_, err := st.Apply(ctx, id, jobs.Transition{To: tt.to})
			if tt.wantErr == nil {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, tt.wantErr)
			var te *lease.TransitionError
			assert.ErrorAs(t, err, &te)
		})
	}
}

func TestFinishStoresResultAcksAndRefreshesTTL(t *testing.T) {
	testsvc.EachRedis(t, testFinishStoresResultAcksAndRefreshesTTL)
}

func testFinishStoresResultAcksAndRefreshesTTL(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	require.NoError(t, st.EnsureGroup(ctx))
	id := create(t, st)
	msgs := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "c1", Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Val()
	require.Len(t, msgs[0].Messages, 1)
	msgID := msgs[0].Messages[0].ID

	rdb.Expire(ctx, jobs.JobKey(id), 5*time.Second)
	rdb.Expire(ctx, jobs.EventsKey(id), 5*time.Second)
	_, err := st.SetRunning(ctx, id, "worker.start", nil)
	require.NoError(t, err)
	assert.Greater(t, rdb.TTL(ctx, jobs.JobKey(id)).Val(), 50*time.Second)
	_, err = st.AppendEvent(ctx, id, "progress", "worker.llm", json.RawMessage(`{"pct":50}`))
	require.NoError(t, err)

	_, err = st.Finish(ctx, id, jobs.Done, "worker.done", json.RawMessage(`{"text":"ok"}`), nil, msgID)
	require.NoError(t, err)
	assert.EqualValues(t, 0, rdb.XPending(ctx, jobs.QueueStream, jobs.Group).Val().Count)

	j, err := st.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, jobs.Done, j.Status)
	assert.JSONEq(t, `{"text":"ok"}`, string(j.Result))

	evs, err := st.Events(ctx, id, "0", 100)
	require.NoError(t, err)
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	assert.Equal(t, []string{"queued", "running", "progress", "done"}, types)
	assert.JSONEq(t, `{"text":"ok"}`, string(evs[3].Data))

	// Nothing more may be appended once terminal.
	_, err = st.AppendEvent(ctx, id, "progress", "late", nil)
	assert.ErrorIs(t, err, jobs.ErrFinished)
	_, err = st.AppendEvent(ctx, id, "done", "x", nil)
	assert.Error(t, err)

	after, err := st.Events(ctx, id, evs[1].ID, 100)
	require.NoError(t, err)
	require.Len(t, after, 2)
	assert.Equal(t, evs[2].ID, after[0].ID)
}

func TestFinishVersusCancelRaceHasOneTerminalEvent(t *testing.T) {
	testsvc.EachRedis(t, testFinishVersusCancelRaceHasOneTerminalEvent)
}

func testFinishVersusCancelRaceHasOneTerminalEvent(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	for range 30 {
		id := create(t, st)
		_, err := st.SetRunning(ctx, id, "w", nil)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, errs[0] = st.Finish(ctx, id, jobs.Done, "w", json.RawMessage(`1`), nil, "")
		}()
		go func() { defer wg.Done(); _, errs[1] = st.Cancel(ctx, id, "gateway.cancel", "user") }()
		wg.Wait()
		assert.True(t, (errs[0] == nil) != (errs[1] == nil), "exactly one wins: %v", errs)
		for _, err := range errs {
			if err != nil {
				assert.ErrorIs(t, err, jobs.ErrFinished)
			}
		}
		terminal := 0
		for _, m := range rdb.XRange(ctx, jobs.EventsKey(id), "-", "+").Val() {
			if jobs.IsTerminal(m.Values["type"].(string)) {
				terminal++
			}
		}
		assert.Equal(t, 1, terminal)
	}
}

func TestCancelPublishes(t *testing.T) { testsvc.EachRedis(t, testCancelPublishes) }

func testCancelPublishes(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	id := create(t, st)
	sub := rdb.PSubscribe(ctx, jobs.CancelPattern)
	defer sub.Close()
	_, err := sub.Receive(ctx)
	require.NoError(t, err)
	_, err = st.Cancel(ctx, id, "gateway.cancel", "user")
	require.NoError(t, err)
	select {
	case m := <-sub.Channel():
		assert.Equal(t, jobs.CancelChannel(id), m.Channel)
		assert.Equal(t, id, m.Payload)
	case <-time.After(2 * time.Second):
		t.Fatal("no cancel message")
	}
	_, err = st.Cancel(ctx, "missing", "gateway.cancel", "user")
	assert.True(t, errors.Is(err, jobs.ErrNotFound))
}

func TestBacklog(t *testing.T) { testsvc.EachRedis(t, testBacklog) }

func testBacklog(t *testing.T) {
	for _, mode := range []string{"lag", "xrange"} {
		t.Run(mode, func(t *testing.T) {
			st, rdb := newStore(t)
			ctx := context.Background()
			if mode == "xrange" {
				st.ForceRange()
			}
			n, err := st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 0, n)
			for range 5 {
				create(t, st)
			}
			n, err = st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 5, n, "no group yet")
			require.NoError(t, st.EnsureGroup(ctx))
			msgs := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "c", Streams: []string{jobs.QueueStream, ">"}, Count: 2}).Val()
			require.Len(t, msgs[0].Messages, 2)
			n, err = st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 5, n, "2 pending + 3 undelivered")
			rdb.XAck(ctx, jobs.QueueStream, jobs.Group, msgs[0].Messages[0].ID)
			n, err = st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 4, n)
			n, err = st.Backlog(ctx, 1)
			require.NoError(t, err)
			assert.Greater(t, n, int64(1))
		})
	}
}
