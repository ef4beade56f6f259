package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// On the XPENDING+XCLAIM path one recovery pass reads the pending list
// once, like XAUTOCLAIM's cursor does, not once per claim: with a long
// list of live entries ahead of the idle ones, starting every claim from
// the head would read it again for every few idle entries, holding the
// pass's slots all along.
func TestFallbackRecoveryPassReadsPendingListOnce(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		rdb, _, _ := newRedis(t)
		st := jobs.NewStore(rdb)
		ctx := context.Background()
		const live, orphans = 500, 12
		total := live + orphans
		ids := make([]string, total)
		for i := range ids {
			ids[i] = create(t, st, "chat", `{}`)
		}
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "dead",
			Streams: []string{jobs.QueueStream, ">"}, Count: int64(total)}).Result()
		require.NoError(t, err)
		msgs := res[0].Messages
		require.Len(t, msgs, total)
		s := testSettings()
		s.Concurrency, s.Batch = 2, 2
		s.ClaimFallback = true
		s.ClaimIdle = time.Minute
		s.ClaimInterval = time.Hour
		var orphaned []string
		for _, m := range msgs[live:] {
			orphaned = append(orphaned, m.ID)
		}
		makeIdle(t, rdb, "dead", orphaned...)
		var held []string
		for _, m := range msgs[:live] {
			held = append(held, m.ID)
		}
		require.NoError(t, rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: jobs.QueueStream, Group: jobs.Group,
			Consumer: "alive", MinIdle: 0, Messages: held}).Err())

		// Pages of the pending list only: each claim also looks at its own
		// entry (XPENDING from its id to its id).
		pending := &testsvc.CommandCounter{Match: func(cmd redis.Cmder) bool {
			a := cmd.Args()
			return cmd.Name() == "xpending" && !(len(a) >= 5 && a[3] == a[4])
		}}
		rdb.AddHook(pending)
		startPool(t, rdb, st, "rescuer", s, backend.NewRegistry(map[string]backend.Backend{
			"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
				return json.RawMessage(`{}`), nil
			}),
		}))
		for _, id := range ids[live:] {
			if j := waitTerminal(t, st, id, 10*time.Second); j.Status != jobs.Done {
				t.Fatalf("job %s: %s", id, j.Status)
			}
		}
		// The list is six pages of 100; claims of 2 take six rounds. Read
		// from the head each time, that is some forty pages.
		assert.LessOrEqual(t, pending.N(), int64(20), "XPENDING pages read in one pass")
	})
}
