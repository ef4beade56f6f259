package pipeline

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the §8 figures as Prometheus series:
//
//	enqueue_qps            rate(euterpe_pipeline_enqueued_total[1m])
//	queue_backlog          euterpe_pipeline_backlog
//	job_latency_p95        histogram_quantile(0.95, rate(euterpe_pipeline_job_duration_seconds_bucket[5m]))
//	fail_rate              rate(euterpe_pipeline_failures_total[5m]) / rate(euterpe_pipeline_finished_total[5m])
//	idempotency_conflicts  euterpe_pipeline_idempotency_conflicts_total
//	dlq_size               euterpe_pipeline_dlq_size
//
// Series carry job_type (and error_code, status) labels, never job ids:
// the per-job tracing fields are on the log lines.
type Metrics struct {
	Enqueued  *prometheus.CounterVec
	Conflicts *prometheus.CounterVec
	Failures  *prometheus.CounterVec
	Finished  *prometheus.CounterVec
	Duration  *prometheus.HistogramVec
	// ScheduleRefused counts the scheduled days whose message was refused
	// for good: each (type, symbol, asof) once, since its mark keeps the
	// scheduler from refusing it again.
	ScheduleRefused *prometheus.CounterVec
}

// NewMetrics creates the series and registers them, with the backlog and
// DLQ gauges read from store at scrape time, on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer, store *Store) *Metrics {
	m := &Metrics{
		Enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_pipeline_enqueued_total", Help: "Pipeline jobs created and enqueued (rate: enqueue_qps).",
		}, []string{"job_type"}),
		Conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_pipeline_idempotency_conflicts_total", Help: "Submits answered with an existing job of the same idempotency key.",
		}, []string{"job_type"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_pipeline_failures_total", Help: "Pipeline job failures by error_code (each failed attempt).",
		}, []string{"job_type", "error_code"}),
		Finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_pipeline_finished_total", Help: "Pipeline job attempts that ended, by the status they left the job in.",
		}, []string{"job_type", "status"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "euterpe_pipeline_job_duration_seconds", Help: "Pipeline job latency, enqueue to success or final failure (p95: job_latency_p95).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 14),
		}, []string{"job_type", "status"}),
		ScheduleRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_pipeline_schedule_refused_total", Help: "Scheduled days not enqueued because their message was refused (INVALID_MESSAGE, MESSAGE_TOO_LARGE); each day once.",
		}, []string{"job_type", "error_code"}),
	}
	if reg != nil {
		reg.MustRegister(m.Enqueued, m.Conflicts, m.Failures, m.Finished, m.Duration, m.ScheduleRefused)
		if store != nil {
			reg.MustRegister(&gauges{store: store})
		}
	}
	return m
}

func (m *Metrics) enqueued(jobType string) {
	if m != nil {
		m.Enqueued.WithLabelValues(jobType).Inc()
	}
}

func (m *Metrics) conflict(jobType string) {
	if m != nil {
		m.Conflicts.WithLabelValues(jobType).Inc()
	}
}

func (m *Metrics) scheduleRefused(jobType, code string) {
	if m != nil {
		m.ScheduleRefused.WithLabelValues(jobType, code).Inc()
	}
}

func (m *Metrics) finished(msg JobMessage, status, _ string, at time.Time) {
	if m == nil {
		return
	}
	m.Finished.WithLabelValues(msg.JobType, status).Inc()
	if !msg.CreatedAt.IsZero() {
		m.Duration.WithLabelValues(msg.JobType, status).Observe(at.Sub(msg.CreatedAt).Seconds())
	}
}

func (m *Metrics) failed(msg JobMessage, code, status string, at time.Time) {
	if m == nil {
		return
	}
	m.Failures.WithLabelValues(msg.JobType, code).Inc()
	if status == StatusQueued {
		m.Finished.WithLabelValues(msg.JobType, "retried").Inc()
		return
	}
	m.finished(msg, status, code, at)
}

var (
	backlogDesc = prometheus.NewDesc("euterpe_pipeline_backlog", "Pipeline jobs queued (visible or waiting for a retry).", nil, nil)
	dlqDesc     = prometheus.NewDesc("euterpe_pipeline_dlq_size", "Pipeline jobs in the dead-letter queue.", nil, nil)
)

type gauges struct{ store *Store }

func (g *gauges) Describe(ch chan<- *prometheus.Desc) { ch <- backlogDesc; ch <- dlqDesc }

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	backlog, dlq, err := g.store.Counts(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(backlogDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(backlog))
	ch <- prometheus.MustNewConstMetric(dlqDesc, prometheus.GaugeValue, float64(dlq))
}
