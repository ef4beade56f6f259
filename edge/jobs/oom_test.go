package jobs_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A Redis out of memory (maxmemory reached, no eviction) refuses a
// script's first write and allows the writes after it. The scripts make
// the command that can fail their first write, so a create or a
// transition refused for memory has written nothing at all, and a finish
// leaves its queue message pending for a retry.
func TestOutOfMemoryWritesNothing(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		tests := []struct {
			name  string
			apply func(st *jobs.Store, id, msgID string) error
		}{
			{"create", func(st *jobs.Store, _, _ string) error {
				_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
				return err
			}},
			{"create with idempotency key", func(st *jobs.Store, _, _ string) error {
				_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60,
					IdempotencyKey: "other", Fingerprint: "f"})
				return err
			}},
			{"start", func(st *jobs.Store, id, _ string) error {
				_, err := st.SetRunning(ctx, id, "worker.start", nil)
				return err
			}},
			{"finish with acknowledgement and cancel", func(st *jobs.Store, id, msgID string) error {
				_, err := st.Apply(ctx, id, jobs.Transition{To: jobs.Canceled, Publish: true, AckMessageID: msgID})
				return err
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				rdb := testsvc.PrivateRedis(t, "maxmemory-policy", "noeviction")
				st := jobs.NewStore(rdb)
				st.Capture = jobs.CaptureStream
				require.NoError(t, st.EnsureGroup(ctx))
				c, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60,
					IdempotencyKey: "k", Fingerprint: "f"})
				require.NoError(t, err)
				msgs := readGroup(t, rdb, 1)
				require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "1").Err())
				before := snapshot(t, rdb)

				err = tc.apply(st, c.ID, msgs[0].ID)

				require.Error(t, err)
				assert.Contains(t, err.Error(), "OOM")
				assert.Equal(t, before, snapshot(t, rdb), "nothing written")
				pending, err := rdb.XPending(ctx, jobs.QueueStream, jobs.Group).Result()
				require.NoError(t, err)
				assert.EqualValues(t, 1, pending.Count, "the message is still pending")
				require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
				require.NoError(t, tc.apply(st, c.ID, msgs[0].ID), "once memory is freed")
			})
		}
	})
}
