package runner

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// reporter turns ffmpeg's frequent progress reports into occasional
// intermediate status events: one when the percentage has grown by at least
// 10 points, checked once per heartbeat interval. A write that comes back
// stale means the lease is lost: it calls abort with that error, so the
// work stops at once rather than at the next heartbeat (contract §4). It
// owns one goroutine, stopped by stop.
type reporter struct {
	mu      sync.Mutex
	percent float64
	done    chan struct{}
	wg      sync.WaitGroup
}

func (r *Runner) newReporter(j *inbox.Job, abort context.CancelCauseFunc) *reporter {
	rep := &reporter{done: make(chan struct{})}
	if r.progress == nil {
		return rep
	}
	rep.wg.Add(1)
	go func() {
		defer rep.wg.Done()
		t := time.NewTicker(lease.HeartbeatInterval(r.set.LeaseTTL))
		defer t.Stop()
		last := 0
		for {
			select {
			case <-rep.done:
				return
			case <-t.C:
			}
			rep.mu.Lock()
			p := int(math.Floor(rep.percent))
			rep.mu.Unlock()
			if !progressDue(last, p) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := r.progress.Progress(ctx, j, p)
			cancel()
			if errors.Is(err, lease.ErrStale) {
				abort(err)
				return
			}
			if err != nil {
				r.log.Debug("progress event not recorded", "job_id", j.ID, "err", err)
				continue
			}
			last = p
		}
	}()
	return rep
}

// progressDue says whether percent p is worth an event after one for last.
// The step is measured from the last event, not from multiples of 10: a
// jump from 9 to 15 and a crawl from 15 to 21 would otherwise be two
// events 6 points apart. 100 is left to the succeeded event.
func progressDue(last, p int) bool { return p-last >= 10 && p < 100 }

func (rep *reporter) set(p float64) {
	rep.mu.Lock()
	rep.percent = p
	rep.mu.Unlock()
}

func (rep *reporter) stop() {
	close(rep.done)
	rep.wg.Wait()
}
