package ship

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// runShipper runs h's shipper until the test ends.
func runShipper(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.sh.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (h *harness) captured() int64 {
	return h.rdb.XLen(context.Background(), jobs.CaptureStream).Val()
}

// The default busy check reads jobs:stream: queued jobs make the shipper
// take one batch per pace and no more; once the queue is empty it catches
// up at full speed.
func TestYieldsWhileJobsQueuedAndCatchesUpWhenIdle(t *testing.T) {
	h := newHarness(t, 64<<20, func(c *Config) { c.MoveBatch, c.YieldPace = 10, time.Hour })
	h.jobs(10, 2, `{"text":"tok"}`) // 5 events a job
	require.EqualValues(t, 50, h.captured())
	runShipper(t, h)

	// One batch at start (the minimum pace), then nothing for an hour.
	require.Eventually(t, func() bool { return h.captured() == 40 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	assert.EqualValues(t, 40, h.captured(), "the mover moved while the workers were busy")
	assert.LessOrEqual(t, h.rc.Count(), 10, "the sender sent more than one batch while the workers were busy")
	assert.True(t, h.sh.Yielding())

	require.NoError(t, h.rdb.Del(context.Background(), jobs.QueueStream).Err()) // the workers took everything
	require.Eventually(t, func() bool { return h.rc.Count() == 50 }, 10*time.Second, 10*time.Millisecond)
	assert.Zero(t, h.captured())
	assert.False(t, h.sh.Yielding())
}

// While busy for good, the mover and sender still go on at the pace, so a
// long busy period cannot starve shipping.
func TestYieldKeepsAMinimumPace(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	h := newHarness(t, 64<<20, func(c *Config) {
		c.MoveBatch, c.YieldPace = 10, 100*time.Millisecond
		c.Busy = func(context.Context) (bool, error) { return busy.Load(), nil }
	})
	h.jobs(10, 2, `{"text":"tok"}`)
	start := time.Now()
	runShipper(t, h)
	require.Eventually(t, func() bool { return h.rc.Count() == 50 }, 10*time.Second, 5*time.Millisecond)
	// Five batches of ten: the first at once, then one per 100 ms.
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "the shipper did not pace itself")
	assert.True(t, h.sh.Yielding())
}

// Past the ceiling the mover moves while busy, down to under the ceiling,
// so Redis memory stays bounded; the rest waits for the pace.
func TestMoverRunsAnywayPastTheCeiling(t *testing.T) {
	h := newHarness(t, 64<<20, func(c *Config) {
		c.MoveBatch, c.YieldPace, c.YieldCeiling = 10, time.Hour, 20
		c.Busy = func(context.Context) (bool, error) { return true, nil }
	})
	h.jobs(10, 2, `{"text":"tok"}`)
	runShipper(t, h)
	require.Eventually(t, func() bool { return h.captured() == 10 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	assert.EqualValues(t, 10, h.captured(), "the mover went on below the ceiling while busy")
}

// A busy check that fails counts as idle: shipping does not stop on it.
func TestFailingBusyCheckDoesNotStopShipping(t *testing.T) {
	h := newHarness(t, 64<<20, func(c *Config) {
		c.MoveBatch, c.YieldPace = 10, time.Hour
		c.Busy = func(context.Context) (bool, error) { return true, context.DeadlineExceeded }
	})
	h.jobs(10, 2, `{"text":"tok"}`)
	runShipper(t, h)
	require.Eventually(t, func() bool { return h.rc.Count() == 50 }, 10*time.Second, 5*time.Millisecond)
}

// A negative pace never yields: busy or not, the shipper goes at full speed.
func TestNegativePaceNeverYields(t *testing.T) {
	h := newHarness(t, 64<<20, func(c *Config) {
		c.MoveBatch, c.YieldPace = 10, -1
		c.Busy = func(context.Context) (bool, error) { return true, nil }
	})
	h.jobs(10, 2, `{"text":"tok"}`)
	runShipper(t, h)
	require.Eventually(t, func() bool { return h.rc.Count() == 50 }, 10*time.Second, 5*time.Millisecond)
	assert.False(t, h.sh.Yielding())
}
