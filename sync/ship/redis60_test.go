package ship

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Every command the shipper sends (XRANGE with COUNT, XDEL, XLEN, XINFO
// GROUPS for the yield, the capturing scripts) runs on Redis 6.0 as on 7:
// the jobs queue, yield and ship, then catch up once the queue is empty.
func TestShipsOnEveryRedis(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		h := newHarness(t, 64<<20, func(c *Config) { c.MoveBatch, c.YieldPace = 10, time.Hour })
		want := h.written(h.jobs(10, 2, `{"text":"tok"}`))
		require.EqualValues(t, 50, h.captured())
		runShipper(t, h)
		require.Eventually(t, func() bool { return h.captured() == 40 }, 5*time.Second, 5*time.Millisecond)
		assert.True(t, h.sh.Yielding(), "the queued jobs were not seen as work")

		require.NoError(t, h.rdb.Del(context.Background(), jobs.QueueStream).Err())
		require.Eventually(t, func() bool { return h.rc.Count() == len(want) }, 10*time.Second, 10*time.Millisecond)
		assert.Equal(t, want, h.rc.Events())
		assert.Zero(t, h.captured())
	})
}
