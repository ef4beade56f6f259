package ship

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// A clock_skew answer is resent at once with the signing clock set from
// central's Date header; a second one in a row (central's clock still
// disagrees, or something in front of it answers so) backs off rather
// than spin, longer each time. Once a batch goes through the count starts
// again.
func TestRepeatedClockSkewBacksOff(t *testing.T) {
	h := newHarness(t, 64<<20, func(c *Config) {
		c.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
		c.BackoffBase, c.BackoffMax = 100*time.Millisecond, 800*time.Millisecond
		c.Rand = func() float64 { return 0.999 }
	})
	h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		shiptest.Refuse(w, http.StatusUnauthorized, wire.CodeClockSkew)
		return true
	})
	ctx := context.Background()
	want := h.written(h.jobs(1, 1, `{}`))
	_, err := h.sh.MoveOnce(ctx)
	require.NoError(t, err)
	var waits []time.Duration
	for i := 0; i < 4; i++ {
		r := h.sh.SendOnce(ctx)
		require.Equal(t, actClockSkew, r.Action, "%+v", r)
		waits = append(waits, r.Wait.Round(10*time.Millisecond))
	}
	assert.Equal(t, []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}, waits)
	assert.InDelta(t, (-2 * time.Hour).Seconds(), time.Duration(h.sh.offset.Load()).Seconds(), 2, "signing with central's clock")

	h.rc.SetHook(nil)
	r := h.sh.SendOnce(ctx)
	require.Equal(t, actAccepted, r.Action, "%+v", r)
	assert.Equal(t, want, h.rc.Events())
	h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		shiptest.Refuse(w, http.StatusUnauthorized, wire.CodeClockSkew)
		return true
	})
	h.jobs(1, 0, `{}`)
	_, err = h.sh.MoveOnce(ctx)
	require.NoError(t, err)
	r = h.sh.SendOnce(ctx)
	require.Equal(t, actClockSkew, r.Action, "%+v", r)
	assert.Zero(t, r.Wait, "the first skew after a batch went through is resent at once")
}

// A heartbeat refused for clock skew corrects the signing clock as a
// batch's refusal does: the next heartbeat and the next batch go through
// without a refusal of their own.
func TestHeartbeatClockSkewCorrectsTheSigningClock(t *testing.T) {
	for _, off := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
		t.Run(off.String(), func(t *testing.T) {
			h := newHarness(t, 64<<20, func(c *Config) { c.Now = func() time.Time { return time.Now().Add(off) } })
			ctx := context.Background()
			code, err := h.sh.SendHeartbeat(ctx)
			require.Error(t, err)
			require.Equal(t, http.StatusUnauthorized, code)
			assert.InDelta(t, -off.Seconds(), time.Duration(h.sh.offset.Load()).Seconds(), 2)

			code, err = h.sh.SendHeartbeat(ctx)
			require.NoError(t, err)
			assert.Equal(t, http.StatusNoContent, code)
			require.Len(t, h.rc.Statuses(), 1)
			assert.WithinDuration(t, time.Now(), h.rc.Statuses()[0].SentAt, 5*time.Second)

			want := h.written(h.jobs(1, 1, `{}`))
			_, err = h.sh.MoveOnce(ctx)
			require.NoError(t, err)
			r := h.sh.SendOnce(ctx)
			require.Equal(t, actAccepted, r.Action, "%+v", r)
			assert.Equal(t, want, h.rc.Events())
		})
	}
}
