package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

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
// entry, a transition whose events stream refused stored the new status
// without its event, and one whose capture stream refused stored the
// status and the event with no capture entry, so central never heard of
// it.
func TestStreamRefusingEntriesWritesNothing(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		type refusal struct {
			name    string
			exhaust func(id string) string // the stream to exhaust
			apply   func(st *jobs.Store, id string) error
		}
		tests := []refusal{
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
		// The capture stream refuses only once the event is written: the
		// script takes the event (and a create's queue entry) back. What
		// remains of them is the streams' last ids, which DUMP shows and
		// no reader does, so the keys are compared by what they hold.
		capture := func(string) string { return jobs.CaptureStream }
		tests = append(tests,
			refusal{"create, capture stream", capture, tests[1].apply},
			refusal{"start, capture stream", capture, tests[2].apply},
			refusal{"finish, capture stream", capture, tests[3].apply},
			refusal{"start, capture stream, events stream deleted", capture, tests[2].apply},
			refusal{"finish, capture stream, events stream deleted", capture, tests[3].apply},
		)
		// These delete the job's events stream first, as an operator might
		// by hand: the refused event must not leave behind an empty stream
		// that no TTL would ever remove.
		noEvents := map[string]bool{
			"start, capture stream, events stream deleted":  true,
			"finish, capture stream, events stream deleted": true,
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				st, rdb := newStore(t)
				st.Capture = jobs.CaptureStream
				id := create(t, st)
				if noEvents[tc.name] {
					require.NoError(t, rdb.Del(ctx, jobs.EventsKey(id)).Err())
				}
				key := tc.exhaust(id)
				require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: lastStreamID,
					Values: []string{"f", "v"}}).Err())
				before := contents(t, rdb)

				err := tc.apply(st, id)

				require.Error(t, err)
				assert.Contains(t, err.Error(), "last possible ID")
				assert.NotErrorIs(t, err, jobs.ErrWrongType)
				assert.Equal(t, before, contents(t, rdb), "nothing written")
			})
		}
	})
}

// contents is every key of the database with what a reader sees of it:
// its value, fields or entries (and a stream's pending count), and its
// TTL to 10 s.
func contents(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range rdb.Keys(ctx, "*").Val() {
		var v any
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "string":
			v = rdb.Get(ctx, k).Val()
		case "hash":
			v = rdb.HGetAll(ctx, k).Val()
		case "stream":
			pending := int64(0)
			if p, err := rdb.XPending(ctx, k, jobs.Group).Result(); err == nil {
				pending = p.Count
			}
			v = fmt.Sprint(rdb.XRange(ctx, k, "-", "+").Val(), " pending ", pending)
		default:
			v = typ
		}
		// To 10 s: the seconds Redis answers flip half a second after
		// the TTL is set, which a busy machine can take between two calls.
		out[k] = fmt.Sprint(v, " ttl ", rdb.TTL(ctx, k).Val().Round(10*time.Second))
	}
	return out
}

// A create refused by the capture stream leaves the queue as it was for
// every reader, not only by its entries: on Redis 7 an entry added and
// deleted ahead of the workers' group counts in entries-added and never in
// the group's entries-read, so the lag (and the counters Backlog falls
// back on) would count one job too many for as long as the stream lives;
// and a queue cap's trim made on the way would drop entries for a job
// never created.
func TestCaptureRefusalLeavesQueueAsItWas(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		refuse := func(t *testing.T, st *jobs.Store, rdb *redis.Client) {
			t.Helper()
			require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobs.CaptureStream, ID: lastStreamID,
				Values: []string{"f", "v"}}).Err())
			_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
			require.ErrorContains(t, err, "last possible ID")
			require.NoError(t, rdb.Del(ctx, jobs.CaptureStream).Err())
		}
		t.Run("backlog", func(t *testing.T) {
			st, rdb := newStore(t)
			st.Capture = jobs.CaptureStream
			require.NoError(t, st.EnsureGroup(ctx))
			create(t, st)
			readGroup(t, rdb, 1)
			refuse(t, st, rdb)
			create(t, st)
			readGroup(t, rdb, 1)
			for _, queued := range []int64{0, 1} {
				n, err := st.Backlog(ctx, 100)
				require.NoError(t, err)
				assert.EqualValues(t, 2+queued, n, "2 pending, %d undelivered", queued)
				create(t, st)
			}
		})
		t.Run("queue cap", func(t *testing.T) {
			st, rdb := newStore(t)
			st.Capture = jobs.CaptureStream
			// A cap far below the length: the approximate trim drops every
			// whole node of entries (100 each by default) it can.
			const queued = 250
			for range queued {
				create(t, st)
			}
			st.QueueMaxLen = 1
			refuse(t, st, rdb)
			n, err := rdb.XLen(ctx, jobs.QueueStream).Result()
			require.NoError(t, err)
			assert.EqualValues(t, queued, n, "queue entries")
		})
	})
}
