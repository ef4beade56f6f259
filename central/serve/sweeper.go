package serve

import (
	"context"
	"time"

	"github.com/vesta-cx/euterpe/central/idempotency"
)

// Sweeper is the built-in housekeeping role: it recovers jobs whose lease
// expired while no executor claims (to queued, or dead_letter when their
// attempts are spent), deletes expired idempotency keys and prunes finished
// jobs past retention.
type Sweeper struct {
	Deps      *Deps
	Keys      *idempotency.Store
	Interval  time.Duration
	Retention time.Duration
}

// Name is "sweeper".
func (s *Sweeper) Name() string { return RoleSweeper }

// Run sweeps every Interval until ctx is done.
func (s *Sweeper) Run(ctx context.Context) error {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.sweep(ctx)
		}
	}
}

func (s *Sweeper) sweep(ctx context.Context) {
	log := s.Deps.Log
	for {
		n, err := s.Deps.Inbox.Reclaim(ctx, 100)
		if err != nil {
			log.Warn("sweep: reclaim expired leases", "err", err)
			break
		}
		if n > 0 {
			log.Info("sweep: recovered jobs with expired leases", "count", n)
		}
		if n < 100 {
			break
		}
	}
	if n, err := s.Keys.Purge(ctx); err != nil {
		log.Warn("sweep: purge idempotency keys", "err", err)
	} else if n > 0 {
		log.Debug("sweep: purged idempotency keys", "count", n)
	}
	if s.Retention > 0 {
		// The cutoff is on the store's clock, the database's, like the
		// finished_at it is compared with: a pod whose own clock runs ahead
		// would otherwise prune jobs before their retention ends.
		if n, err := s.Deps.Inbox.Prune(ctx, s.Deps.Inbox.Now().Add(-s.Retention)); err != nil {
			log.Warn("sweep: prune finished jobs", "err", err)
		} else if n > 0 {
			log.Info("sweep: pruned finished jobs", "count", n)
		}
	}
}
