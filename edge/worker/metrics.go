package worker

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// metrics are the pool's series on the daemon's registry: jobs finished
// by this process and how long their backend ran. A job counts once its
// outcome is written (a job left pending for recovery counts when the
// process that finishes it writes it).
type metrics struct {
	finished *prometheus.CounterVec
	run      *prometheus.HistogramVec
}

// RunBuckets are the job run time histogram's upper bounds in seconds:
// from a quick tool call to a long generation on the board.
var RunBuckets = []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// RegisterMetrics adds euterpe_edge_jobs_finished_total{task,status} and
// euterpe_edge_job_run_seconds{task} to reg. Call it before Run.
func (p *Pool) RegisterMetrics(reg prometheus.Registerer) error {
	m := &metrics{
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "euterpe_edge_jobs_finished_total",
			Help: "Jobs this process finished, by task and final status (done, error, canceled).",
		}, []string{"task", "status"}),
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "euterpe_edge_job_run_seconds",
			Help:    "Time a job's backend ran on this process, by task.",
			Buckets: RunBuckets,
		}, []string{"task"}),
	}
	for _, c := range []prometheus.Collector{m.finished, m.run} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	p.metrics = m
	return nil
}

func (p *Pool) observe(o outcome, status string) {
	if p.metrics == nil {
		return
	}
	task := taskLabel(o.j.task)
	p.metrics.finished.WithLabelValues(task, status).Inc()
	p.metrics.run.WithLabelValues(task).Observe(o.ran.Seconds())
}

// otherTask labels every task that is not one of the contract's.
const otherTask = "unknown"

// taskLabel is the task label of a job. A queue message's task is whatever
// its writer put there: taken as it is, one that is not UTF-8 would make
// the Prometheus client panic, and each new name would add series without
// bound.
func taskLabel(task string) string {
	if jobs.ValidTask(task) {
		return task
	}
	return otherTask
}
