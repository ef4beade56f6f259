package runner

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the runner's Prometheus series.
type Metrics struct {
	Claims       prometheus.Counter     // jobs claimed
	ClaimSeconds prometheus.Histogram   // duration of a claim call (found or not)
	Attempts     *prometheus.CounterVec // finished attempts by outcome
	Refreshes    *prometheus.CounterVec // refresh calls by result
}

// Attempt outcomes (label "outcome" of euterpe_runner_attempts_total): a
// failed attempt is labelled with the status the inbox's policy chose.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeLeaseLost = "lease_lost"
	OutcomeReleased  = "released"
	// and the status after a recorded failure: queued (retry), failed,
	// dead_letter.
)

// NewMetrics creates the series and registers them on reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "euterpe_runner_claims_total", Help: "Transcode jobs claimed by this process.",
		}),
		ClaimSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "euterpe_runner_claim_seconds", Help: "Duration of a claim (including empty ones).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_runner_attempts_total",
			Help: "Finished job attempts by outcome: succeeded, lease_lost, released, or the status a failure led to (queued, failed, dead_letter).",
		}, []string{"outcome"}),
		Refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_runner_refresh_requests_total",
			Help: "Credential refresh requests by result: refreshed (credential_version advanced) or not_refreshed.",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Claims, m.ClaimSeconds, m.Attempts, m.Refreshes)
	}
	return m
}
