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

// lastStreamID is the largest id a stream entry can have: a stream holding
// it refuses every XADD with '*' ("exhausted the last possible ID").
const lastStreamID = "18446744073709551615-18446744073709551615"

// A stream that refuses XADD for a reason other than its type (here one
// whose last id is the largest there is; out of memory is another) fails
// the operation with Redis's error and nothing written. Before, a create
// whose queue stream refused left a job hash and event with no queue
// entry, and a transition whose events stream refused stored the new
// status without its event.
func TestStreamRefusingEntriesWritesNothing(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		tests := []struct {
			name    string
			exhaust func(id string) string // the stream to exhaust; id is "" for a create
			apply   func(st *jobs.Store, id string) error
		}{
			{"create, queue stream", func(string) string { return jobs.QueueStream },
				func(st *jobs.Store, _ string) error {
					_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
					return err
				}},
			{"create with idempotency key, queue stream", func(string) string { return jobs.QueueStream },
				func(st *jobs.Store, _ string) error {
					_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60,
						IdempotencyKey: "k", Fingerprint: "f"})
					return err
				}},
			{"start, events stream", jobs.EventsKey,
				func(st *jobs.Store, id string) error {
					_, err := st.SetRunning(ctx, id, "worker.start", nil)
					return err
				}},
			{"finish, events stream", jobs.EventsKey,
				func(st *jobs.Store, id string) error {
					_, err := st.Apply(ctx, id, jobs.Transition{To: jobs.Canceled, Publish: true,
						Error: json.RawMessage(`{"code":"canceled"}`)})
					return err
				}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				st, rdb := newStore(t)
				st.Capture = jobs.CaptureStream
				id := create(t, st)
				key := tc.exhaust(id)
				require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: lastStreamID,
					Values: []string{"f", "v"}}).Err())
				before := snapshot(t, rdb)

				err := tc.apply(st, id)

				require.Error(t, err)
				assert.Contains(t, err.Error(), "last possible ID")
				assert.NotErrorIs(t, err, jobs.ErrWrongType)
				assert.Equal(t, before, snapshot(t, rdb), "nothing written")
			})
		}
	})
}
