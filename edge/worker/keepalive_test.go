package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A job whose ttl_s is shorter than its run, on a backend that writes no
// event while it runs, is not expired under the worker: the heartbeat keeps
// its hash, events and idempotency record alive, so it finishes done with
// its result readable, and the finish gives its keys back the ttl_s
// retention. With a claim idle time whose heartbeat period is longer than
// ttl_s, the job's first heartbeat comes at the status poll after it
// started.
func TestHeartbeatKeepsRunningJobAlive(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			claimIdle time.Duration
		}{
			{"heartbeat period below ttl", 600 * time.Millisecond},
			{"heartbeat period above ttl", 30 * time.Second},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				rdb, st, _ := newRedis(t)
				// Two seconds: room for a busy machine between the create
				// and the first refresh, and after the finish for the
				// reads below. Not kept alive, the job is gone mid-run.
				const ttl = 2
				run := 4500 * time.Millisecond
				be := backend.NewRegistry(map[string]backend.Backend{"tool": backend.Func(func(ctx context.Context, _ backend.Request, _ backend.Delta) (json.RawMessage, error) {
					select {
					case <-time.After(run):
						return json.RawMessage(`{"answer":42}`), nil
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				})})
				s := testSettings()
				s.ClaimIdle = tc.claimIdle
				startPool(t, rdb, st, "w-ttl", s, be)

				c, err := st.Create(ctx, jobs.NewJob{Task: "tool", Payload: json.RawMessage(`{}`), TTL: ttl,
					IdempotencyKey: "keep-" + strings.ReplaceAll(tc.name, " ", "-"), Fingerprint: "f"})
				require.NoError(t, err)
				j := waitTerminal(t, st, c.ID, 15*time.Second)
				require.Equal(t, jobs.Done, j.Status)
				assert.JSONEq(t, `{"answer":42}`, string(j.Result))
				assert.Equal(t, []string{"queued", "running", "done"}, eventTypes(t, st, c.ID))
				for _, k := range []string{jobs.JobKey(c.ID), jobs.EventsKey(c.ID), jobs.IdempotencyKey("keep-" + strings.ReplaceAll(tc.name, " ", "-"))} {
					left := rdb.TTL(ctx, k).Val()
					assert.True(t, left > 0 && left <= ttl*time.Second, "%s expires in %v, want the job's ttl_s after the finish", k, left)
				}
			})
		}
	})
}

// What a heartbeat does about each in-flight job, by where its queue entry
// is and whether the job's backend call has returned. In particular an
// entry the job's own outcome write acknowledged, in the moment before the
// job is forgotten, is no cause for a warning.
func TestHeartbeatFindings(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			entry     string // "ours", "acked" or "other"
			finishing bool
			abandoned bool // the running job is cancelled
			lost      bool // the outcome write is to be given up
			warning   string
		}{
			{"running, ours", "ours", false, false, false, ""},
			{"running, claimed", "other", false, true, false, "queue message claimed by another consumer; abandoning job"},
			{"running, acknowledged elsewhere", "acked", false, true, false, "queue message no longer pending; abandoning job"},
			{"finished, ours", "ours", true, false, false, ""},
			{"finished, acknowledged by its outcome write", "acked", true, false, false, ""},
			{"finished, claimed", "other", true, false, true, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				rdb, st, _ := newRedis(t)
				var logs testsvc.LogBuffer
				p, err := New(slog.New(slog.NewJSONHandler(&logs, nil)), rdb, st, "w-hb", testSettings(), nil)
				require.NoError(t, err)
				create(t, st, "chat", `{}`)
				got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "w-hb",
					Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Result()
				require.NoError(t, err)
				msg := got[0].Messages[0]
				switch tc.entry {
				case "acked":
					require.NoError(t, st.Ack(ctx, msg.ID))
				case "other":
					require.NoError(t, rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: jobs.QueueStream, Group: jobs.Group,
						Consumer: "w-other", Messages: []string{msg.ID}}).Err())
				}
				j, ok := parse(entry{msg: msg, deliveries: 1})
				require.True(t, ok)
				j.ctx, j.cancel = context.WithCancelCause(ctx)
				j.finishing.Store(tc.finishing)
				p.track(j)

				p.refresh(ctx, p.tracked())
				assert.Equal(t, tc.abandoned, j.ctx.Err() != nil, "job cancelled")
				assert.Equal(t, tc.lost, j.lost.Load(), "outcome given up")
				if tc.warning == "" {
					assert.NotContains(t, logs.String(), `"level":"WARN"`)
				} else {
					assert.Contains(t, logs.String(), tc.warning)
				}
			})
		}
	})
}

// A heartbeat keeps a running job's idempotency record alive by the job's
// own field: a job created with a key ("1"), or one whose hash an earlier
// version wrote (no field), has its record looked up and refreshed; a job
// created without one ("0") is not looked up, even where a record names it.
func TestHeartbeatRefreshesIdempotencyRecordByField(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			field     string // "" deletes it
			refreshed bool
		}{
			{"created with a key", "1", true},
			{"written by an earlier version", "", true},
			{"created without a key", "0", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				rdb, st, _ := newRedis(t)
				p, err := New(nil, rdb, st, "w-idem", testSettings(), nil)
				require.NoError(t, err)
				c, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60,
					IdempotencyKey: "hb", Fingerprint: "f"})
				require.NoError(t, err)
				if tc.field == "" {
					require.NoError(t, rdb.HDel(ctx, jobs.JobKey(c.ID), jobs.HasIdempotencyField).Err())
				} else {
					require.NoError(t, rdb.HSet(ctx, jobs.JobKey(c.ID), jobs.HasIdempotencyField, tc.field).Err())
				}
				_, err = st.SetRunning(ctx, c.ID, "w-idem", nil)
				require.NoError(t, err)
				got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "w-idem",
					Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Result()
				require.NoError(t, err)
				j, ok := parse(entry{msg: got[0].Messages[0], deliveries: 1})
				require.True(t, ok)
				j.ctx, j.cancel = context.WithCancelCause(ctx)
				p.track(j)
				records := []string{jobs.IdempotencyKey("hb"), jobs.IdempotencyFingerprintKey("hb"), jobs.IdempotencyJobKey(c.ID)}
				for _, k := range records {
					require.True(t, rdb.Expire(ctx, k, 5*time.Second).Val())
				}

				p.refresh(ctx, p.tracked())
				for _, k := range records {
					left := rdb.TTL(ctx, k).Val()
					if tc.refreshed {
						assert.Greater(t, left, 50*time.Second, "%s not refreshed", k)
					} else {
						assert.LessOrEqual(t, left, 5*time.Second, "%s looked up", k)
					}
				}
				assert.Greater(t, rdb.TTL(ctx, jobs.JobKey(c.ID)).Val(), 50*time.Second, "the job's own keys are refreshed")
			})
		}
	})
}
