package jobs_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A status outside the state machine (a corrupt hash, one a newer version
// wrote, or a job key that is no hash at all) refuses every transition with
// ErrUnknownStatus, which is neither ErrFinished nor gone, and leaves the
// key and the events as they were; a known status refused is never
// ErrUnknownStatus.
func TestUnknownStatusRefusedAsUnknown(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		tests := []struct {
			name        string
			status      string
			to          jobs.Transition
			wantUnknown bool
		}{
			{"unknown to running", "paused", jobs.Transition{To: jobs.Running}, true},
			{"unknown to error", "paused", jobs.Transition{To: jobs.Error, Error: json.RawMessage(`{"code":"x"}`)}, true},
			{"empty-looking to event", "  ", jobs.Transition{EventType: "delta"}, true},
			{"queued to done is known", jobs.Queued, jobs.Transition{To: jobs.Done}, false},
			{"job key not a hash", "", jobs.Transition{To: jobs.Running}, true},
			// Refused before the status is written: a terminal status must
			// not be stored without its event.
			{"events key not a stream", "!events", jobs.Transition{To: jobs.Canceled}, true},
			// The events key is looked at on the refused and missing paths
			// too: the job is not finished or gone, it is damaged.
			{"events key not a stream, job finished", "!events done", jobs.Transition{To: jobs.Canceled}, true},
			{"events key not a stream, job hash gone", "!events gone", jobs.Transition{To: jobs.Canceled}, true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				st, rdb := newStore(t)
				id := create(t, st)
				switch tc.status {
				case "":
					require.NoError(t, rdb.Del(ctx, jobs.JobKey(id)).Err())
					require.NoError(t, rdb.Set(ctx, jobs.JobKey(id), "not a hash", 0).Err())
				case "!events", "!events done", "!events gone":
					require.NoError(t, rdb.Del(ctx, jobs.EventsKey(id)).Err())
					require.NoError(t, rdb.Set(ctx, jobs.EventsKey(id), "not a stream", 0).Err())
					if tc.status == "!events done" {
						require.NoError(t, rdb.HSet(ctx, jobs.JobKey(id), "status", jobs.Done).Err())
					}
					if tc.status == "!events gone" {
						require.NoError(t, rdb.Del(ctx, jobs.JobKey(id)).Err())
					}
				default:
					require.NoError(t, rdb.HSet(ctx, jobs.JobKey(id), "status", tc.status).Err())
				}
				before, _ := rdb.Dump(ctx, jobs.JobKey(id)).Result()
				_, err := st.Apply(ctx, id, tc.to)
				eventsSpoiled := strings.HasPrefix(tc.status, "!events")
				if tc.status != "" && !eventsSpoiled {
					require.ErrorIs(t, err, lease.ErrInvalidTransition)
				}
				assert.NotErrorIs(t, err, jobs.ErrFinished)
				assert.False(t, jobs.IsGone(err))
				assert.Equal(t, tc.wantUnknown, jobs.IsUnknownStatus(err), "%v", err)
				after, _ := rdb.Dump(ctx, jobs.JobKey(id)).Result()
				assert.Equal(t, before, after)
				if !eventsSpoiled {
					assert.Len(t, rdb.XRange(ctx, jobs.EventsKey(id), "-", "+").Val(), 1)
				}
			})
		}
	})
}

// Reading a job whose key holds another type is ErrUnknownStatus (what a
// transition of it answers too), not a bare WRONGTYPE error a caller can
// only take for Redis trouble; a missing job stays ErrNotFound.
func TestGetOfWrongTypeKeyIsUnknownStatus(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		tests := []struct {
			name  string
			spoil func(t *testing.T, rdb *redis.Client, key string)
			want  error
		}{
			{"string", func(t *testing.T, rdb *redis.Client, key string) {
				require.NoError(t, rdb.Set(ctx, key, "x", 0).Err())
			}, jobs.ErrUnknownStatus},
			{"list", func(t *testing.T, rdb *redis.Client, key string) {
				require.NoError(t, rdb.RPush(ctx, key, "x").Err())
			}, jobs.ErrUnknownStatus},
			{"missing", func(*testing.T, *redis.Client, string) {}, jobs.ErrNotFound},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				st, rdb := newStore(t)
				id := create(t, st)
				require.NoError(t, rdb.Del(ctx, jobs.JobKey(id)).Err())
				tc.spoil(t, rdb, jobs.JobKey(id))
				_, err := st.Get(ctx, id)
				require.ErrorIs(t, err, tc.want)
				if tc.want == jobs.ErrUnknownStatus {
					assert.NotErrorIs(t, err, jobs.ErrNotFound)
				}
			})
		}
	})
}
