package console_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/console"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// The jobs list and the queue health page read Redis with 6.0 commands
// only, and read the same numbers from Redis 6.0 as from 7.
func TestConsoleReadsRunOnRedis60(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		_, opt := testsvc.Redis(t)
		cmds := testsvc.NewCommandLog()
		cmds.Attach(opt)
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(cmds)
		store := jobs.NewStore(rdb)
		ctx := context.Background()
		require.NoError(t, store.EnsureGroup(ctx))

		for range 3 {
			_, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
			require.NoError(t, err)
		}
		// One delivered to a worker and held (pending), one finished.
		msgs, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "w1", Streams: []string{jobs.QueueStream, ">"}, Count: 2}).Result()
		require.NoError(t, err)
		require.Len(t, msgs[0].Messages, 2)
		done := msgs[0].Messages[1]
		_, err = store.SetRunning(ctx, done.Values["job_id"].(string), "w", nil)
		require.NoError(t, err)
		_, err = store.Finish(ctx, done.Values["job_id"].(string), jobs.Done, "w", json.RawMessage(`{}`), nil, done.ID)
		require.NoError(t, err)

		list, err := console.LatestJobs(ctx, rdb, "", 100)
		require.NoError(t, err)
		assert.Equal(t, 3, list.Total)
		assert.Equal(t, map[string]int{jobs.Queued: 2, jobs.Done: 1}, list.Counts)

		q, err := console.ReadQueue(ctx, store, 20)
		require.NoError(t, err)
		assert.True(t, q.GroupExists)
		assert.Equal(t, int64(2), q.Backlog, "one pending, one undelivered")
		assert.Equal(t, int64(1), q.Pending)
		assert.Equal(t, int64(1), q.Undelivered)
		require.Len(t, q.Workers, 1)
		require.Len(t, q.Workers[0].Jobs, 1)
		assert.Equal(t, msgs[0].Messages[0].Values["job_id"], q.Workers[0].Jobs[0].JobID)

		cmds.CheckRedis60(t)
		for _, want := range []string{"SCAN", "HMGET", "XINFO CONSUMERS", "XPENDING"} {
			assert.True(t, cmds.Sent(want), "did not send %s", want)
		}
	})
}
