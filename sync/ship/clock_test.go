package ship

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Jetson boots hours off, learns central's clock from a clock_skew
// answer, and NTP then sets its own clock right: the correction learnt
// earlier is now wrong by as much, and the shipper must learn again rather
// than stay refused.
func TestClockSetRightAfterACorrectionStillSyncs(t *testing.T) {
	for _, off := range []time.Duration{3 * time.Hour, -3 * time.Hour} {
		t.Run(off.String(), func(t *testing.T) {
			start := time.Now()
			var skew atomic.Int64
			skew.Store(int64(off))
			h := newHarness(t, 64<<20, func(c *Config) {
				c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			})
			ctx := context.Background()
			h.jobs(1, 1, `{}`)
			_, err := h.sh.MoveOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, actClockSkew, h.sh.SendOnce(ctx).Action)
			require.Equal(t, actAccepted, h.sh.SendOnce(ctx).Action)

			skew.Store(0) // NTP steps the clock
			h.jobs(1, 1, `{}`)
			_, err = h.sh.MoveOnce(ctx)
			require.NoError(t, err)
			var acts []action
			for i := 0; i < 3; i++ {
				r := h.sh.SendOnce(ctx)
				acts = append(acts, r.Action)
				if r.Action == actAccepted || r.Idle {
					break
				}
				assert.Zero(t, r.Wait, "the first skew after the clock was set right is retried at once")
			}
			assert.Equal(t, []action{actClockSkew, actAccepted}, acts)
			assert.Equal(t, 8, h.rc.Count())
			// The heartbeat's start time is central's clock too, not the
			// wrong one the edge had when it started.
			_, err = h.sh.SendHeartbeat(ctx)
			require.NoError(t, err)
			hb := h.rc.Statuses()[0]
			assert.WithinDuration(t, start, hb.StartedAt, 5*time.Second)
			assert.GreaterOrEqual(t, hb.UptimeS, int64(0))
		})
	}
}
