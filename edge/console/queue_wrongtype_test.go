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

// retypeBeforeRead replaces one key with another type just before the
// pipeline that reads the job hashes runs: a job deleted and its key
// reused between the SCAN and the HMGET.
type retypeBeforeRead struct {
	ctl  *redis.Client
	key  string
	as   func(ctx context.Context, ctl *redis.Client, key string) error
	done bool
}

func (h *retypeBeforeRead) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *retypeBeforeRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *retypeBeforeRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.done && len(cmds) > 0 && cmds[0].Name() == "hmget" {
			h.done = true
			if err := h.ctl.Del(ctx, h.key).Err(); err != nil {
				return err
			}
			if err := h.as(ctx, h.ctl, h.key); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// A job key that stops being a hash between the SCAN and the read of the
// hashes is left out like one that expired there; it does not fail the
// whole list.
func TestLatestJobsSkipsKeyRetypedAfterScan(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		tests := []struct {
			name string
			as   func(ctx context.Context, ctl *redis.Client, key string) error
		}{
			{"string", func(ctx context.Context, ctl *redis.Client, key string) error {
				return ctl.Set(ctx, key, "x", 0).Err()
			}},
			{"list", func(ctx context.Context, ctl *redis.Client, key string) error {
				return ctl.RPush(ctx, key, "x").Err()
			}},
			{"deleted", func(context.Context, *redis.Client, string) error { return nil }},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ctl, opt := testsvc.Redis(t)
				store := jobs.NewStore(ctl)
				ctx := context.Background()
				var ids []string
				for range 3 {
					c, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
					require.NoError(t, err)
					ids = append(ids, c.ID)
				}
				rdb := redis.NewClient(opt)
				t.Cleanup(func() { _ = rdb.Close() })
				hook := &retypeBeforeRead{ctl: ctl, key: jobs.JobKey(ids[1]), as: tc.as}
				rdb.AddHook(hook)

				list, err := console.LatestJobs(ctx, rdb, "", 100)
				require.NoError(t, err)
				require.True(t, hook.done)
				assert.Equal(t, 2, list.Total)
				assert.Equal(t, map[string]int{jobs.Queued: 2}, list.Counts)
				var got []string
				for _, r := range list.Rows {
					got = append(got, r.ID)
				}
				assert.ElementsMatch(t, []string{ids[0], ids[2]}, got)
			})
		}
	})
}
