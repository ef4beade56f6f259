package ship

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// Collectors are the shipper's series for /metrics. The spool gauges are
// read at scrape time; the counters count since the daemon started. While
// the spool is not open every spool series is 0 and
// euterpe_sync_spool_open says why.
func (s *Shipper) Collectors() []prometheus.Collector {
	stat := func(f func(spool.Stats) float64) func() float64 {
		return func() float64 {
			sp := s.Spool()
			if sp == nil {
				return 0
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := sp.Stats(ctx)
			if err != nil {
				return 0
			}
			return f(st)
		}
	}
	var redisDropped atomic.Int64 // last euterpe_sync_redis_dropped_total read
	count := func(f func(*spool.Spool) int64) func() float64 {
		return func() float64 {
			if sp := s.Spool(); sp != nil {
				return float64(f(sp))
			}
			return 0
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_sync_spool_open", Help: "1 once the sync spool is open; 0 while it cannot be opened (captured events wait in Redis)."},
			func() float64 {
				if s.Spool() == nil {
					return 0
				}
				return 1
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_sync_spool_events", Help: "Events in the sync spool, not yet accepted by central."},
			stat(func(st spool.Stats) float64 { return float64(st.Events) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_sync_spool_bytes", Help: "Size of the spooled events as the spool budget counts it."},
			stat(func(st spool.Stats) float64 { return float64(st.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_sync_spool_over_budget_bytes", Help: "Bytes the sync spool holds beyond its budget (EUTERPE_SYNC_SPOOL_MAX_MB): lifecycle and terminal events, which are never dropped, kept while central is out of reach; 0 within the budget."},
			stat(func(st spool.Stats) float64 { return float64(st.OverBudget) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_sync_spool_oldest_age_seconds", Help: "Age of the oldest spooled event (0 when the spool is empty)."},
			stat(func(st spool.Stats) float64 {
				if st.OldestTS == 0 {
					return 0
				}
				return time.Since(time.UnixMilli(st.OldestTS)).Seconds()
			})),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_shipped_events_total", Help: "Events central answered for as stored, each once when its batch is settled: new ones and duplicates of an earlier send whose answer was lost."},
			func() float64 { return float64(s.Shipped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_dropped_events_total", Help: "Delta events dropped from the full spool (reported to central as gaps)."},
			count((*spool.Spool).Dropped)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_redis_dropped_total", Help: "Delta events not captured because the capture stream in Redis was at its cap (reported to central as gaps); counted in Redis, so it also counts while the spool is not open."},
			func() float64 {
				// A scrape Redis does not answer keeps the last value: a
				// counter falling to 0 and back reads as a reset, and
				// increase() would count every drop once more. The
				// heartbeat keeps its own last value, so neither can set
				// the other's back with an older read.
				return float64(redisDroppedTotal(context.Background(), s.rdb, &redisDropped))
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_quarantined_batches_total", Help: "Batches (or single events) set aside because central refused them or they cannot be sent."},
			func() float64 { return float64(s.Quarantined()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_quarantine_pruned_total", Help: "Quarantined batches removed, oldest first, to keep the quarantine within the spool's budget."},
			count((*spool.Spool).QuarantinePruned)),
	}
}
