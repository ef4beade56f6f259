package ship

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collectors are the shipper's series for /metrics. The spool gauges are
// read at scrape time; the counters count since the daemon started.
func (s *Shipper) Collectors() []prometheus.Collector {
	stat := func(f func(events, bytes, oldest int64) float64) func() float64 {
		return func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, err := s.spool.Stats(ctx)
			if err != nil {
				return 0
			}
			return f(st.Events, st.Bytes, st.OldestTS)
		}
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_sync_spool_events", Help: "Events in the sync spool, not yet accepted by central."},
			stat(func(e, _, _ int64) float64 { return float64(e) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_sync_spool_bytes", Help: "Size of the spooled events as the spool budget counts it."},
			stat(func(_, b, _ int64) float64 { return float64(b) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_sync_spool_oldest_age_seconds", Help: "Age of the oldest spooled event (0 when the spool is empty)."},
			stat(func(_, _, o int64) float64 {
				if o == 0 {
					return 0
				}
				return time.Since(time.UnixMilli(o)).Seconds()
			})),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_shipped_events_total", Help: "Events central accepted."},
			func() float64 { return float64(s.Shipped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_dropped_events_total", Help: "Delta events dropped from the full spool (reported to central as gaps)."},
			func() float64 { return float64(s.spool.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_quarantined_batches_total", Help: "Batches (or single events) set aside because central refused them or they cannot be sent."},
			func() float64 { return float64(s.Quarantined()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "euterpe_sync_quarantine_pruned_total", Help: "Quarantined batches removed, oldest first, to keep the quarantine within the spool's budget."},
			func() float64 { return float64(s.spool.QuarantinePruned()) }),
	}
}
