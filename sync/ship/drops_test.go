package ship

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// capped is a harness whose scripts stop capturing deltas once the
// capture stream holds 20 entries; it writes three jobs of ten deltas
// each: the first is captured whole (13 entries), the second loses its
// last five deltas, the third all ten.
func capped(t *testing.T) (*harness, map[string]wire.Event) {
	t.Helper()
	h := newHarness(t, 64<<20, nil)
	h.store.CaptureMax = 20
	want := h.written(h.jobs(3, 10, `{"text":"tok"}`))
	require.Equal(t, int64(24), h.captured())
	return h, want
}

// checkGaps checks what central got from a capped harness: every
// lifecycle and terminal event, and per job the deltas that arrived plus
// the gaps' counts add up to the ten written, each gap naming dropped
// entries only.
func checkGaps(t *testing.T, h *harness, want map[string]wire.Event) {
	t.Helper()
	got := h.rc.Events()
	deltas := map[string]int64{}
	for id, e := range want {
		if e.Type != "delta" {
			assert.Contains(t, got, id, "a %s event was not shipped", e.Type)
		} else if _, ok := got[id]; ok {
			deltas[e.JobID]++
		}
	}
	gaps := h.rc.Gaps()
	require.Len(t, gaps, 2, "one gap per job that lost deltas")
	for _, g := range gaps {
		assert.Equal(t, "delta", g.Type)
		assert.Equal(t, wire.GapID("jetson-1", g.JobID, g.FirstEntryID), g.GapID)
		assert.Contains(t, want, wire.EventID("jetson-1", g.JobID, g.FirstEntryID))
		assert.NotContains(t, got, wire.EventID("jetson-1", g.JobID, g.FirstEntryID), "a gap names an event central has")
		assert.NotContains(t, got, wire.EventID("jetson-1", g.JobID, g.LastEntryID), "a gap names an event central has")
		deltas[g.JobID] += g.Count
	}
	require.Len(t, deltas, 3)
	for job, n := range deltas {
		assert.Equal(t, int64(10), n, "job %s: deltas shipped plus gaps", job)
	}
	assert.Zero(t, h.rdb.Exists(context.Background(), jobs.CaptureDrops, jobs.CaptureDropsTaken).Val(), "recorded drops leave Redis")
}

// Past the capture stream's cap the scripts keep deltas out of Redis and
// record the drops; the mover takes them into the spool as gaps and
// central hears of each, as of the spool's own drops. The count of drops
// is a metric, read from Redis, so it shows while the spool is not open.
func TestRedisCapDropsAreShippedAsGaps(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		h, want := capped(t)
		reg := prometheus.NewRegistry()
		for _, c := range h.sh.Collectors() {
			require.NoError(t, reg.Register(c))
		}
		assert.Equal(t, 15.0, counter(t, reg, "euterpe_sync_redis_dropped_total"))
		h.drain()
		checkGaps(t, h, want)
		assert.Equal(t, int64(2), h.sh.GapsSent())
		assert.Equal(t, 15.0, counter(t, reg, "euterpe_sync_redis_dropped_total"))
	})
}

// A mover that took the drops from Redis and failed or died before the
// spool recorded them, or after that and before Redis heard of it, loses
// no gap: taken drops stay in Redis until the spool holds them, and are
// handed out again. At worst a gap is sent twice, under the same gap id.
func TestTakenDropsAreNotLost(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash func(t *testing.T, h *harness)
		sent  int64 // gaps the shipper sent
	}{
		{"spool fails after the take", func(t *testing.T, h *harness) {
			require.NoError(t, h.sh.Spool().Close())
			_, err := h.sh.MoveOnce(context.Background())
			require.Error(t, err)
			h.sh = h.open(64<<20, nil)
		}, 2},
		{"died after the take", func(t *testing.T, h *harness) {
			_, _, _, err := jobs.TakeDrops(context.Background(), h.rdb, jobs.CaptureStream)
			require.NoError(t, err)
		}, 2},
		{"died after the spool recorded them", func(t *testing.T, h *harness) {
			d, _, _, err := jobs.TakeDrops(context.Background(), h.rdb, jobs.CaptureStream)
			require.NoError(t, err)
			n, err := h.sh.Spool().AddGaps(context.Background(), gapsOf(d))
			require.NoError(t, err)
			require.Equal(t, 2, n)
		}, 2},
		{"died after central had them", func(t *testing.T, h *harness) {
			d, _, _, err := jobs.TakeDrops(context.Background(), h.rdb, jobs.CaptureStream)
			require.NoError(t, err)
			_, err = h.sh.Spool().AddGaps(context.Background(), gapsOf(d))
			require.NoError(t, err)
			r := h.sh.SendOnce(context.Background())
			require.Equal(t, actAccepted, r.Action, "%+v", r)
			require.Equal(t, 2, r.Gaps)
		}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, want := capped(t)
			tc.crash(t, h)
			h.drain()
			checkGaps(t, h, want)
			assert.Equal(t, tc.sent, h.sh.GapsSent())
		})
	}
}

// The drops total is a counter read from Redis at scrape time. A scrape
// while Redis does not answer keeps the last value read: a counter that
// fell to 0 and came back would read as a reset, and rate() and increase()
// would count every drop since the start once more.
func TestRedisDroppedTotalHoldsWhileRedisIsDown(t *testing.T) {
	h, _ := capped(t)
	opts := *h.rdb.Options()
	rdb := redis.NewClient(&opts)
	sh, err := New(nil, rdb, h.sh.Spool(), Config{URL: h.rc.URL, EdgeID: "jetson-1", Secret: []byte(testSecret)})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	for _, c := range sh.Collectors() {
		require.NoError(t, reg.Register(c))
	}
	assert.Equal(t, 15.0, counter(t, reg, "euterpe_sync_redis_dropped_total"))
	require.NoError(t, rdb.Close())
	assert.Equal(t, 15.0, counter(t, reg, "euterpe_sync_redis_dropped_total"), "Redis down")
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// A move that shutdown cancels says nothing about the capture cap's drops:
// they stay taken for the next start, and a warning would only be noise.
func TestCancelledMoveLogsNoDropWarning(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = h.sh.MoveOnce(ctx)
	assert.NotContains(t, h.logs.String(), "cannot record the deltas")
}

// Taken drops of another type than the scripts write (a value someone SET
// there) do not stop drops being reported: the move sets the key aside for
// an operator, says at error level where it is, and ships the drops
// recorded since as gaps.
func TestTakenDropsOfAnotherTypeAreSetAside(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		h, want := capped(t)
		ctx := context.Background()
		require.NoError(t, h.rdb.Set(ctx, jobs.CaptureDropsTaken, "by hand", 0).Err())

		h.drain()
		checkGaps(t, h, want)
		keys := h.rdb.Keys(ctx, jobs.CaptureDropsTaken+":bad:*").Val()
		require.Len(t, keys, 1)
		assert.Equal(t, "by hand", h.rdb.Get(ctx, keys[0]).Val())
		assert.Regexp(t, `level=ERROR msg=".*another type.*".*kept_as=`+keys[0], h.logs.String())
	})
}
