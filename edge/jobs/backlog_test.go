package jobs_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// fetchedEntries counts the stream entries (each with its payload) that
// replies bring back to the client.
type fetchedEntries struct{ n atomic.Int64 }

func (f *fetchedEntries) count(cmd redis.Cmder) {
	if c, ok := cmd.(*redis.XMessageSliceCmd); ok {
		f.n.Add(int64(len(c.Val())))
	}
}

func (f *fetchedEntries) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (f *fetchedEntries) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		f.count(cmd)
		return err
	}
}

func (f *fetchedEntries) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			f.count(cmd)
		}
		return err
	}
}

// Counting the backlog where Redis reports no lag (6.0, or 7 after
// deletions) costs what is pending, not what is queued: the gateway
// re-measures every 100 ms, /metrics and the console with no limit, and
// every undelivered entry carries a payload of up to 200 KB.
func TestBacklogCountDoesNotFetchUndelivered(t *testing.T) {
	testsvc.EachRedis(t, testBacklogCountDoesNotFetchUndelivered)
}

func testBacklogCountDoesNotFetchUndelivered(t *testing.T) {
	st, rdb := newStore(t)
	st.ForceRange()
	ctx := context.Background()
	require.NoError(t, st.EnsureGroup(ctx))
	payload, _ := json.Marshal(map[string]string{"q": strings.Repeat("x", 1024)})
	const queued = 300
	for range queued {
		_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: payload, TTL: 60})
		require.NoError(t, err)
	}
	msgs := readGroup(t, rdb, 3)
	require.NoError(t, st.Ack(ctx, msgs[1].ID)) // finished: acknowledged and deleted

	f := &fetchedEntries{}
	rdb.AddHook(f)
	for _, limit := range []int64{1 << 40, 10_000, queued - 2} {
		n, err := st.Backlog(ctx, limit)
		require.NoError(t, err)
		assert.EqualValues(t, queued-1, n, "2 pending + 297 undelivered (limit %d)", limit)
	}
	n, err := st.Backlog(ctx, 10)
	require.NoError(t, err)
	assert.Greater(t, n, int64(10))
	assert.LessOrEqual(t, f.n.Load(), int64(4*2), "entries fetched: at most the pending ones per count")
}

// Workers of another implementation of the contract acknowledge without
// deleting: the stream then keeps finished entries before the group's
// position, and the count stays exact where the limit is decided.
func TestBacklogWithAcknowledgedEntriesKept(t *testing.T) {
	testsvc.EachRedis(t, testBacklogWithAcknowledgedEntriesKept)
}

func testBacklogWithAcknowledgedEntriesKept(t *testing.T) {
	for _, mode := range []string{"lag", "xrange"} {
		t.Run(mode, func(t *testing.T) {
			st, rdb := newStore(t)
			ctx := context.Background()
			if mode == "xrange" {
				st.ForceRange()
			}
			require.NoError(t, st.EnsureGroup(ctx))
			for range 150 {
				create(t, st)
			}
			msgs := readGroup(t, rdb, 130)
			for _, m := range msgs[:128] {
				require.NoError(t, rdb.XAck(ctx, jobs.QueueStream, jobs.Group, m.ID).Err())
			}
			// 2 pending, 20 undelivered, 128 acknowledged but kept.
			for _, limit := range []int64{1 << 40, 100, 22} {
				n, err := st.Backlog(ctx, limit)
				require.NoError(t, err)
				assert.EqualValues(t, 22, n, "limit %d", limit)
			}
			n, err := st.Backlog(ctx, 21)
			require.NoError(t, err)
			assert.Greater(t, n, int64(21))
		})
	}
}

// With workers of both kinds on Redis 7 (one acknowledging without
// deleting, one deleting what it finishes), XINFO GROUPS reports no lag
// whenever the last entry delivered is also the last deleted, and the
// kept entries defeat the count from behind. The group's entries-read and
// the stream's entries-added still give the undelivered count exactly
// (nothing after the group's position was deleted), so the payloads of
// the undelivered entries are not fetched to count them.
func TestBacklogLagUnknownUsesCounters(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		st, rdb := newStore(t)
		ctx := context.Background()
		if testsvc.IsRedis60(t) {
			t.Skip("Redis 6.0 keeps no entries-read or entries-added counters")
		}
		require.NoError(t, st.EnsureGroup(ctx))
		payload, _ := json.Marshal(map[string]string{"q": strings.Repeat("x", 1024)})
		const kept, pending, queued = 100, 2, 300
		for range kept + pending + 1 + queued {
			_, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: payload, TTL: 60})
			require.NoError(t, err)
		}
		msgs := readGroup(t, rdb, kept+pending+1)
		for _, m := range msgs[:kept] {
			require.NoError(t, rdb.XAck(ctx, jobs.QueueStream, jobs.Group, m.ID).Err())
		}
		require.NoError(t, st.Ack(ctx, msgs[kept+pending].ID)) // the last delivered, deleted
		groups, err := rdb.XInfoGroups(ctx, jobs.QueueStream).Result()
		require.NoError(t, err)
		require.Len(t, groups, 1)
		require.EqualValues(t, -1, groups[0].Lag, "the scenario must leave Redis without a lag")

		f := &fetchedEntries{}
		rdb.AddHook(f)
		for _, limit := range []int64{1 << 40, 10_000, pending + queued} {
			n, err := st.Backlog(ctx, limit)
			require.NoError(t, err)
			assert.EqualValues(t, pending+queued, n, "limit %d", limit)
		}
		n, err := st.Backlog(ctx, pending+queued-1)
		require.NoError(t, err)
		assert.Greater(t, n, int64(pending+queued-1))
		assert.LessOrEqual(t, f.n.Load(), int64(4*pending), "entries fetched")

		// A deletion after the group's position makes the counters
		// overcount: the count falls back and stays exact.
		tail, err := rdb.XRevRangeN(ctx, jobs.QueueStream, "+", "-", 1).Result()
		require.NoError(t, err)
		require.NoError(t, rdb.XDel(ctx, jobs.QueueStream, tail[0].ID).Err())
		n, err = st.Backlog(ctx, 1<<40)
		require.NoError(t, err)
		assert.EqualValues(t, pending+queued-1, n)
	})
}

// The sync shipper asks whether the workers are busy with limit 1 every
// 200 ms. Where workers of another implementation keep what they
// acknowledge, the entries before the group's position are no guide, and
// answering costs at most the two entries after it, not the 64 before:
// each carries a payload of up to 200 KB.
func TestBacklogYieldCheckWithAcknowledgedEntriesKept(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		tests := []struct {
			name                 string
			acked, held, waiting int
			want                 int64 // Backlog(ctx, 1)
		}{
			{"idle", 200, 0, 0, 0},
			{"one running", 200, 1, 0, 1},
			{"one waiting", 200, 0, 1, 1},
			{"busy", 200, 1, 50, 2},
			{"two running", 200, 2, 50, 2},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				st, rdb := newStore(t)
				st.ForceRange()
				ctx := context.Background()
				require.NoError(t, st.EnsureGroup(ctx))
				for range tc.acked + tc.held + tc.waiting {
					create(t, st)
				}
				msgs := readGroup(t, rdb, int64(tc.acked+tc.held))
				for _, m := range msgs[:tc.acked] {
					require.NoError(t, rdb.XAck(ctx, jobs.QueueStream, jobs.Group, m.ID).Err())
				}
				f := &fetchedEntries{}
				rdb.AddHook(f)
				n, err := st.Backlog(ctx, 1)
				require.NoError(t, err)
				if tc.want > 1 {
					assert.Greater(t, n, int64(1))
				} else {
					assert.Equal(t, tc.want, n)
				}
				assert.LessOrEqual(t, f.n.Load(), int64(2), "entries fetched")
			})
		}
	})
}

// largestReply records the most stream entries one reply brought back.
type largestReply struct {
	fetchedEntries
	most atomic.Int64
}

func (l *largestReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if c, ok := cmd.(*redis.XMessageSliceCmd); ok {
			for n := int64(len(c.Val())); n > l.most.Load(); {
				if l.most.CompareAndSwap(l.most.Load(), n) {
					break
				}
			}
		}
		return err
	}
}

// Where entries must be fetched to be counted (acknowledged entries kept
// by another implementation's workers, and no lag to read), a count with
// no limit fetches them a page at a time: before, the console and
// /metrics read every undelivered entry, each with a payload of up to
// 200 KB, in one reply.
func TestBacklogCountsKeptEntriesByPages(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		st, rdb := newStore(t)
		ctx := context.Background()
		st.ForceRange()
		require.NoError(t, st.EnsureGroup(ctx))
		const total, read, acked = 450, 130, 128
		for range total {
			create(t, st)
		}
		msgs := readGroup(t, rdb, read)
		for _, m := range msgs[:acked] {
			require.NoError(t, rdb.XAck(ctx, jobs.QueueStream, jobs.Group, m.ID).Err())
		}
		l := &largestReply{}
		rdb.AddHook(l)
		for _, limit := range []int64{1 << 40, total, 250} {
			n, err := st.Backlog(ctx, limit)
			require.NoError(t, err)
			if limit >= total-acked {
				assert.EqualValues(t, total-acked, n, "limit %d", limit)
			} else {
				assert.Greater(t, n, limit)
			}
		}
		assert.LessOrEqual(t, l.most.Load(), int64(read-acked+100), "entries in one reply")
	})
}
