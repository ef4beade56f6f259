package ingest

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the ingest's Prometheus series.
type Metrics struct {
	Batches    prometheus.Counter
	Events     *prometheus.CounterVec // result: accepted, duplicate
	Refused    *prometheus.CounterVec // reason: the error code answered
	Gaps       prometheus.Counter
	Heartbeats prometheus.Counter
	Pruned     *prometheus.CounterVec // table
}

// NewMetrics creates the series and registers them on reg (nil: not
// registered, for tests and benchmarks).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "euterpe_sync_batches_total", Help: "Edge sync batches stored (including resent ones).",
		}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_sync_events_total", Help: "Edge events received, by result: accepted (new) or duplicate (already stored).",
		}, []string{"result"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_sync_refused_total", Help: "Sync requests refused, by reason (the error code answered).",
		}, []string{"reason"}),
		Gaps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "euterpe_sync_gaps_total", Help: "New gaps (runs of delta events an edge dropped from its full spool) recorded.",
		}),
		Heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "euterpe_sync_heartbeats_total", Help: "Edge heartbeats stored.",
		}),
		Pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_sync_pruned_total", Help: "Rows deleted by the edge event retention, by table.",
		}, []string{"table"}),
	}
	for _, r := range []string{"accepted", "duplicate"} {
		m.Events.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Batches, m.Events, m.Refused, m.Gaps, m.Heartbeats, m.Pruned)
	}
	return m
}
