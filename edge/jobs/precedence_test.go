package jobs_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A job whose events key holds another type is damaged for good, and says
// so (ErrUnknownStatus, so a worker ends its message) even when a key every
// job shares (the queue stream to acknowledge in, the capture stream, its
// drops) holds another type too; nothing is written. The types are looked
// at only once a check failed, so the answer does not depend on which
// check fails first.
func TestDamagedJobReportedBeforeSharedKeyOfWrongType(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		tests := []struct {
			name   string
			shared string
			as     string
			ack    bool
			t      jobs.Transition
		}{
			{"queue stream to ack in", jobs.QueueStream, "string", true, jobs.Transition{To: jobs.Canceled}},
			{"capture stream", jobs.CaptureStream, "list", false, jobs.Transition{To: jobs.Canceled}},
			{"drops of a capture at its cap", jobs.CaptureDrops, "string", false,
				jobs.Transition{EventType: jobs.CaptureDroppable, Data: json.RawMessage(`{"text":"x"}`)}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				st, rdb := newStore(t)
				st.Capture = jobs.CaptureStream
				st.CaptureMax = 1
				require.NoError(t, st.EnsureGroup(ctx))
				id := create(t, st)
				msgs, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "w",
					Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Result()
				require.NoError(t, err)
				if tc.ack {
					tc.t.AckMessageID = msgs[0].Messages[0].ID
				}
				spoil(t, rdb, jobs.EventsKey(id), "string")
				spoil(t, rdb, tc.shared, tc.as)
				before := snapshot(t, rdb)

				_, err = st.Apply(ctx, id, tc.t)

				require.ErrorIs(t, err, jobs.ErrUnknownStatus)
				assert.NotErrorIs(t, err, jobs.ErrWrongType)
				assert.Equal(t, before, snapshot(t, rdb), "nothing written")
			})
		}
	})
}

// With both the queue and the capture stream of another type, a create
// names the queue stream, as it did when both were looked at before the
// first write.
func TestCreateNamesQueueBeforeCapture(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		st, rdb := newStore(t)
		st.Capture = jobs.CaptureStream
		spoil(t, rdb, jobs.QueueStream, "hash")
		spoil(t, rdb, jobs.CaptureStream, "string")
		before := snapshot(t, rdb)

		_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})

		var wt *jobs.WrongTypeError
		require.ErrorAs(t, err, &wt)
		assert.Equal(t, jobs.QueueStream, wt.Key)
		assert.Equal(t, "hash", wt.Type)
		assert.Equal(t, before, snapshot(t, rdb), "nothing written")
	})
}
