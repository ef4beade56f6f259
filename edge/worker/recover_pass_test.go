package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// One recovery pass reaches every idle entry, however many pages of the
// pending list it takes and whatever the first pages hold: entries
// deleted while pending (XAUTOCLAIM on Redis 7 drops them and returns
// fewer ids than asked with more to come; the fallback claims them and
// finds nothing to run) and entries a live consumer holds (Redis 7's
// XAUTOCLAIM scans at most ten times COUNT entries per call). The pass
// runs once, at start, with no second one for an hour.
func TestRecoveryPassReachesEveryIdleEntry(t *testing.T) {
	testsvc.EachRedis(t, testRecoveryPassReachesEveryIdleEntry)
}

func testRecoveryPassReachesEveryIdleEntry(t *testing.T) {
	tests := []struct {
		name          string
		deleted, live int
	}{
		{"deleted entries first", 6, 0},
		{"live entries first", 0, 40},
		{"both", 4, 30},
	}
	for _, fallback := range []bool{false, true} {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/fallback=%v", tc.name, fallback), func(t *testing.T) {
				rdb, st, _ := newRedis(t)
				ctx := context.Background()
				if !fallback && !SupportsAutoClaim(rdb.Info(ctx, "server").Val()) {
					t.Skip("server has no XAUTOCLAIM")
				}
				const orphans = 9
				total := tc.deleted + tc.live + orphans
				ids := make([]string, total)
				for i := range ids {
					ids[i] = create(t, st, "chat", `{}`)
				}
				res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "dead",
					Streams: []string{jobs.QueueStream, ">"}, Count: int64(total)}).Result()
				if err != nil || len(res[0].Messages) != total {
					t.Fatalf("read: %v", err)
				}
				msgs := res[0].Messages
				// Made idle before the deletes: Redis 7 drops a deleted
				// entry from the pending list when XCLAIM meets it.
				var idle []string
				for _, m := range msgs[:tc.deleted] {
					idle = append(idle, m.ID)
				}
				for _, m := range msgs[tc.deleted+tc.live:] {
					idle = append(idle, m.ID)
				}
				makeIdle(t, rdb, "dead", idle...)
				for _, m := range msgs[:tc.deleted] {
					if err := rdb.XDel(ctx, jobs.QueueStream, m.ID).Err(); err != nil {
						t.Fatal(err)
					}
				}
				s := testSettings()
				s.Concurrency, s.Batch = 2, 2
				s.ClaimFallback = fallback
				s.ClaimIdle = time.Minute
				s.ClaimInterval = time.Hour
				var live []string
				for _, m := range msgs[tc.deleted : tc.deleted+tc.live] {
					live = append(live, m.ID)
				}
				if len(live) > 0 {
					if err := rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: jobs.QueueStream, Group: jobs.Group,
						Consumer: "alive", MinIdle: 0, Messages: live}).Err(); err != nil {
						t.Fatal(err)
					}
				}
				startPool(t, rdb, st, "rescuer", s, backend.NewRegistry(map[string]backend.Backend{
					"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
						return json.RawMessage(`{}`), nil
					}),
				}))
				for _, id := range ids[tc.deleted+tc.live:] {
					// Well within ClaimIdle: the live entries are not idle yet.
					if j := waitTerminal(t, st, id, 10*time.Second); j.Status != jobs.Done {
						t.Fatalf("job %s: %s", id, j.Status)
					}
				}
				for _, id := range ids[tc.deleted : tc.deleted+tc.live] {
					if j, err := st.Get(ctx, id); err != nil || j.Status != jobs.Queued {
						t.Fatalf("live job %s: %v %v", id, j, err)
					}
				}
			})
		}
	}
}
