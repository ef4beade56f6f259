package outbox

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the dispatcher's Prometheus series.
type Metrics struct {
	Attempts    *prometheus.CounterVec // by outcome
	DeadLetters prometheus.Counter
	Latency     prometheus.Histogram // request duration
	Lag         prometheus.Histogram // event commit to 2xx
}

// NewMetrics creates the series and registers them on reg (nil: not
// registered, for tests and benchmarks).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_outbox_attempts_total", Help: "Webhook delivery attempts by outcome.",
		}, []string{"outcome"}),
		DeadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "euterpe_outbox_dead_letter_total", Help: "Outbox events moved to the dead-letter (alert on increase).",
		}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "euterpe_outbox_request_seconds", Help: "Webhook request duration.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 13),
		}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "euterpe_outbox_delivery_lag_seconds", Help: "Time from event commit to a 2xx from the receiver.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Attempts, m.DeadLetters, m.Latency, m.Lag)
	}
	return m
}
