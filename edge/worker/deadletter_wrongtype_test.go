package worker

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A jobs:dead of another type than a stream dead-letters nothing, all or
// nothing: the job is not failed (it would end as error with its message
// pending for ever, failed again by nothing since it is finished), the
// message stays pending for a later pass, and the log names the key and
// its type rather than a bare WRONGTYPE.
func TestDeadLetterToDeadStreamOfWrongType(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		tests := []struct {
			name    string
			failJob bool
		}{
			{"fail the job", true},
			{"job left as it is", false},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				rdb, st, _ := newRedis(t)
				ctx := context.Background()
				id := create(t, st, "chat", `{}`)
				res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "me",
					Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Result()
				require.NoError(t, err)
				msg := res[0].Messages[0]
				require.NoError(t, rdb.Set(ctx, jobs.DeadStream, "x", 0).Err())
				var logs bytes.Buffer
				p, err := New(slog.New(slog.NewTextHandler(&logs, nil)), rdb, st, "me", testSettings(), nil)
				require.NoError(t, err)

				p.deadLetter(ctx, entry{msg: msg, deliveries: 9}, CodeMaxDeliveries, tc.failJob)

				assert.Equal(t, "x", rdb.Get(ctx, jobs.DeadStream).Val())
				j, err := st.Get(ctx, id)
				require.NoError(t, err)
				assert.Equal(t, jobs.Queued, j.Status, "job not failed")
				assert.Len(t, eventTypes(t, st, id), 1)
				pend := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group,
					Start: "-", End: "+", Count: 10}).Val()
				require.Len(t, pend, 1, "message still pending")
				assert.Equal(t, "me", pend[0].Consumer)
				assert.Contains(t, logs.String(), `\"jobs:dead\" holds a string`)
			})
		}
	})
}
