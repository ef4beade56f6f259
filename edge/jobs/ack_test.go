package jobs_test

import (
	"context"
	"encoding/json"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func readGroup(t *testing.T, rdb *redis.Client, n int64) []redis.XMessage {
	t.Helper()
	res := rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "c", Streams: []string{jobs.QueueStream, ">"}, Count: n}).Val()
	require.Len(t, res, 1)
	return res[0].Messages
}

// Finishing a job acknowledges and deletes its queue entry (after the
// hash and the terminal event); the entry of an unfinished job stays
// however many jobs are enqueued after it, because nothing trims the
// queue by default.
func TestFinishedEntriesDeletedPendingKept(t *testing.T) {
	testsvc.EachRedis(t, testFinishedEntriesDeletedPendingKept)
}

func testFinishedEntriesDeletedPendingKept(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	require.NoError(t, st.EnsureGroup(ctx))
	long := create(t, st)
	done := create(t, st)
	msgs := readGroup(t, rdb, 2)
	require.Len(t, msgs, 2)
	for _, id := range []string{long, done} {
		_, err := st.SetRunning(ctx, id, "worker.start", nil)
		require.NoError(t, err)
	}

	_, err := st.Finish(ctx, done, jobs.Done, "worker.finish", json.RawMessage(`{}`), nil, msgs[1].ID)
	require.NoError(t, err)
	assert.Empty(t, rdb.XRange(ctx, jobs.QueueStream, msgs[1].ID, msgs[1].ID).Val(), "finished entry deleted")
	j, err := st.Get(ctx, done)
	require.NoError(t, err)
	assert.Equal(t, jobs.Done, j.Status)

	pipe := rdb.Pipeline()
	for range 3000 {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: jobs.QueueStream, Values: []any{"job_id", "x", "task", "chat", "payload", "{}"}})
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	for range 200 {
		create(t, st)
	}
	kept := rdb.XRange(ctx, jobs.QueueStream, msgs[0].ID, msgs[0].ID).Val()
	require.Len(t, kept, 1, "pending entry survives enqueue volume")
	assert.Equal(t, long, kept[0].Values["job_id"])

	_, err = st.Finish(ctx, long, jobs.Done, "worker.finish", json.RawMessage(`{}`), nil, msgs[0].ID)
	require.NoError(t, err)
	assert.Empty(t, rdb.XRange(ctx, jobs.QueueStream, msgs[0].ID, msgs[0].ID).Val())
	assert.EqualValues(t, 0, rdb.XPending(ctx, jobs.QueueStream, jobs.Group).Val().Count)
	require.NoError(t, st.Ack(ctx, msgs[0].ID), "acking a deleted entry is harmless")
}

// The backlog stays exact when finished entries are deleted, on the Redis 7
// lag path (which reports no lag after some deletions and then falls back
// to counting) and on the forced Redis 6.0 path.
func TestBacklogAfterDeletes(t *testing.T) { testsvc.EachRedis(t, testBacklogAfterDeletes) }

func testBacklogAfterDeletes(t *testing.T) {
	for _, mode := range []string{"lag", "xrange"} {
		t.Run(mode, func(t *testing.T) {
			st, rdb := newStore(t)
			ctx := context.Background()
			if mode == "xrange" {
				st.ForceRange()
			}
			require.NoError(t, st.EnsureGroup(ctx))
			for range 10 {
				create(t, st)
			}
			msgs := readGroup(t, rdb, 4)
			require.Len(t, msgs, 4)
			// Finish the last delivered entry (lag is unknown to Redis 7
			// then), then an earlier one.
			require.NoError(t, st.Ack(ctx, msgs[3].ID))
			n, err := st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 9, n, "3 pending + 6 undelivered")
			require.NoError(t, st.Ack(ctx, msgs[0].ID))
			n, err = st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 8, n)
			more := readGroup(t, rdb, 100)
			require.Len(t, more, 6)
			var ids []string
			for _, m := range append(msgs[1:3], more...) {
				ids = append(ids, m.ID)
			}
			n, err = st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 8, n, "all pending")
			require.NoError(t, st.Ack(ctx, ids...))
			n, err = st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 0, n)
			assert.EqualValues(t, 0, rdb.XLen(ctx, jobs.QueueStream).Val(), "finished entries are gone")
			create(t, st)
			n, err = st.Backlog(ctx, 100)
			require.NoError(t, err)
			assert.EqualValues(t, 1, n)
		})
	}
}
