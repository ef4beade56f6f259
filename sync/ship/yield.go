package ship

import (
	"context"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Defaults of the yield: while the workers are busy the mover and the
// sender each take one batch a second (500 events/s, far above what real
// backends write), and the mover runs at full speed anyway once 100,000
// captured entries wait on sync:events (about 22 MB of Redis memory
// with ~100-byte deltas: MEMORY USAGE of such a stream is ~220 B/entry).
const (
	DefaultYieldPace    = time.Second
	DefaultYieldCeiling = 100_000
)

// busyBacklog reports the edge busy when jobs:stream has entries not yet
// delivered to a worker or delivered and not acknowledged (running).
func busyBacklog(st *jobs.Store) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		n, err := st.Backlog(ctx, 1)
		return n > 0, err
	}
}

// yielder paces one loop while the edge is busy: the loop may take a step
// when the edge is idle, when pace passed since its last step, or when
// over() says a bound is reached.
type yielder struct {
	s    *Shipper
	last time.Time
}

// wait blocks until the loop may take its next step; false when ctx ended.
// A failing busy check counts as idle: shipping must not stop because the
// check cannot be read.
func (y *yielder) wait(ctx context.Context, over func(context.Context) bool) bool {
	if y.s.cfg.YieldPace < 0 {
		return ctx.Err() == nil
	}
	for ctx.Err() == nil {
		busy, err := y.s.cfg.Busy(ctx)
		if err != nil || !busy {
			y.s.yielding.Store(false)
			break
		}
		y.s.yielding.Store(true)
		left := y.s.cfg.YieldPace - y.s.cfg.Now().Sub(y.last)
		if left <= 0 || (over != nil && over(ctx)) {
			break
		}
		daemon.Sleep(ctx, min(left, y.s.cfg.Poll))
	}
	y.last = y.s.cfg.Now()
	return ctx.Err() == nil
}

// overCeiling is the mover's bound: Redis memory stays bounded, so past
// YieldCeiling captured entries the mover does not yield.
func (s *Shipper) overCeiling(ctx context.Context) bool {
	n, err := s.rdb.XLen(ctx, jobs.CaptureStream).Result()
	return err != nil || n >= s.cfg.YieldCeiling
}

// Yielding reports whether the shipper last found the edge busy and paced
// itself (metrics, tests).
func (s *Shipper) Yielding() bool { return s.yielding.Load() }
