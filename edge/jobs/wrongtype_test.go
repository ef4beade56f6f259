package jobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// spoil replaces key with a value of another type than the scripts use.
func spoil(t *testing.T, rdb *redis.Client, key string, as string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rdb.Del(ctx, key).Err())
	switch as {
	case "string":
		require.NoError(t, rdb.Set(ctx, key, "x", 0).Err())
	case "list":
		require.NoError(t, rdb.RPush(ctx, key, "x").Err())
	case "hash":
		require.NoError(t, rdb.HSet(ctx, key, "x", "y").Err())
	default:
		t.Fatalf("spoil as %q", as)
	}
}

// snapshot is every key of the database with its DUMP, so a test can tell
// that a refused operation wrote nothing at all.
func snapshot(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range rdb.Keys(ctx, "*").Val() {
		out[k] = rdb.Dump(ctx, k).Val()
	}
	return out
}

// Create writes the idempotency record, the job hash, its event, the
// capture entry and the queue entry, or none of them: a queue, capture or
// idempotency key holding another type is refused with ErrWrongType before
// the first write. Before, the job could be left without its queue entry
// (queued for ever) or without its capture entry.
func TestCreateWithKeyOfWrongTypeWritesNothing(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		tests := []struct {
			name    string
			key     string // spoiled
			as      string
			idem    string // idempotency key of the request
			capture bool
			taken   bool // the idempotency key already names a job
		}{
			{"queue stream", jobs.QueueStream, "string", "", false, false},
			{"queue stream, with idempotency key", jobs.QueueStream, "hash", "k", false, false},
			{"capture stream", jobs.CaptureStream, "string", "", true, false},
			{"capture stream, with idempotency key", jobs.CaptureStream, "list", "k", true, false},
			{"idempotency key", jobs.IdempotencyKey("k"), "list", "k", false, false},
			{"fingerprint of a taken key", jobs.IdempotencyFingerprintKey("k"), "hash", "k", false, true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				st, rdb := newStore(t)
				if tc.capture {
					st.Capture = jobs.CaptureStream
				}
				nj := jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: tc.idem, Fingerprint: "f"}
				if tc.taken {
					_, err := st.Create(ctx, nj)
					require.NoError(t, err)
				}
				spoil(t, rdb, tc.key, tc.as)
				before := snapshot(t, rdb)
				_, err := st.Create(ctx, nj)
				require.ErrorIs(t, err, jobs.ErrWrongType)
				var wt *jobs.WrongTypeError
				require.ErrorAs(t, err, &wt)
				assert.Equal(t, tc.key, wt.Key)
				assert.Equal(t, tc.as, wt.Type)
				assert.Less(t, len(err.Error()), 512)
				assert.Equal(t, before, snapshot(t, rdb), "nothing written")
			})
		}
	})
}

// A transition writes the status, the event, its capture entry, the cancel
// and the acknowledgement, or none of them. A queue stream (to acknowledge
// in) or capture stream of another type is refused with ErrWrongType
// before the first write; an idempotency record or back-reference of
// another type, or a ttl_s that is no whole number of seconds, only skips
// that TTL refresh, which is best effort, and the transition completes.
// Before, each of them failed the script after the status and the event
// were written, so the caller got an error for a write that happened and
// the cancel and the acknowledgement were lost.
func TestTransitionWithKeyOfWrongType(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		tests := []struct {
			name     string
			key      func(id string) string // spoiled ("" none)
			as       string
			ttl      string // replaces ttl_s when set
			badAck   bool   // acknowledge an id that is no stream id
			complete bool   // the transition completes; else refused, nothing written
		}{
			{"queue stream to ack in", func(string) string { return jobs.QueueStream }, "string", "", false, false},
			{"capture stream", func(string) string { return jobs.CaptureStream }, "hash", "", false, false},
			{"idempotency back-reference", jobs.IdempotencyJobKey, "list", "", false, true},
			{"idempotency record", func(string) string { return jobs.IdempotencyKey("k") }, "hash", "", false, true},
			{"idempotency fingerprint", func(string) string { return jobs.IdempotencyFingerprintKey("k") }, "list", "", false, true},
			{"ttl_s not whole seconds", nil, "", "1.5", false, true},
			{"ttl_s too large", nil, "", "100000000000000000000", false, true},
			{"ack id no stream id", nil, "", "", true, false},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				st, rdb := newStore(t)
				st.Capture = jobs.CaptureStream
				require.NoError(t, st.EnsureGroup(ctx))
				c, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: "k", Fingerprint: "f"})
				require.NoError(t, err)
				id := c.ID
				msgs, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "w",
					Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Result()
				require.NoError(t, err)
				msgID := msgs[0].Messages[0].ID
				if tc.badAck {
					msgID = "not-an-id"
				}
				if tc.key != nil {
					spoil(t, rdb, tc.key(id), tc.as)
				}
				if tc.ttl != "" {
					require.NoError(t, rdb.HSet(ctx, jobs.JobKey(id), "ttl_s", tc.ttl).Err())
				}
				sub := rdb.Subscribe(ctx, jobs.CancelChannel(id))
				defer sub.Close()
				_, err = sub.Receive(ctx)
				require.NoError(t, err)
				before := snapshot(t, rdb)

				_, err = st.Apply(ctx, id, jobs.Transition{To: jobs.Canceled, Step: "gateway.cancel", Publish: true, AckMessageID: msgID})

				if !tc.complete {
					require.Error(t, err)
					if !tc.badAck {
						require.ErrorIs(t, err, jobs.ErrWrongType)
						var wt *jobs.WrongTypeError
						require.ErrorAs(t, err, &wt)
						assert.Equal(t, tc.key(id), wt.Key)
						assert.Equal(t, tc.as, wt.Type)
					}
					assert.NotErrorIs(t, err, jobs.ErrUnknownStatus, "the job itself is fine")
					assert.Equal(t, before, snapshot(t, rdb), "nothing written")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, jobs.Canceled, rdb.HGet(ctx, jobs.JobKey(id), "status").Val())
				evs := rdb.XRange(ctx, jobs.EventsKey(id), "-", "+").Val()
				require.Len(t, evs, 2)
				assert.Equal(t, jobs.Canceled, evs[1].Values["type"])
				assert.Len(t, rdb.XRange(ctx, jobs.CaptureStream, "-", "+").Val(), 2, "event captured")
				m, err := sub.ReceiveTimeout(ctx, 2*time.Second)
				require.NoError(t, err, "cancel published")
				assert.Equal(t, id, m.(*redis.Message).Payload)
				assert.Zero(t, rdb.XLen(ctx, jobs.QueueStream).Val(), "message acknowledged and deleted")
				assert.Empty(t, rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group,
					Start: "-", End: "+", Count: 10}).Val())
				if tc.as != "" {
					assert.Equal(t, before[tc.key(id)], rdb.Dump(ctx, tc.key(id)).Val(), "spoiled key left as it was")
				}
			})
		}
	})
}

// A TTL Redis cannot set (past what EXPIRE takes) is refused before
// anything is written: the hash would otherwise be left with no TTL, no
// event and no queue entry.
func TestCreateRefusesTTLBeyondMax(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		st, rdb := newStore(t)
		ctx := context.Background()
		before := snapshot(t, rdb)
		_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 1 << 62})
		require.Error(t, err)
		assert.Equal(t, before, snapshot(t, rdb), "nothing written")
		_, err = st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: jobs.MaxTTL})
		require.NoError(t, err)
	})
}
