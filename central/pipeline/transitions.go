package pipeline

import "github.com/vesta-cx/euterpe/daemon/lease"

// Job statuses (contract §4.2).
const (
	StatusQueued     = "queued"
	StatusRunning    = "running"
	StatusSucceeded  = "succeeded"
	StatusFailed     = "failed"
	StatusDeadLetter = "dead_letter"
)

// ActiveStatuses are the statuses in which a key has its one job: a submit
// of the same key returns that job (created: false). The partial unique
// index pipeline_jobs_active_key lists the same three.
var ActiveStatuses = []string{StatusQueued, StatusRunning, StatusSucceeded}

// Transitions is §4.2 as data: queued → running → {succeeded | failed} →
// dead_letter. A failure that will be retried goes failed → queued (the
// message becomes visible again); an operator's redrive takes a dead letter
// back to queued. Nothing leaves succeeded, and nothing goes back to
// running except through queued and a new claim (succeeded → running is
// refused).
var Transitions = lease.Transitions{
	Machine:  "pipeline_jobs",
	Terminal: []string{StatusSucceeded},
	Allowed: map[string][]string{
		StatusQueued:     {StatusRunning},
		StatusRunning:    {StatusSucceeded, StatusFailed},
		StatusFailed:     {StatusQueued, StatusDeadLetter},
		StatusDeadLetter: {StatusQueued},
	},
}

// Lease is the visibility timeout as a lease spec: a claim takes a queued
// row whose visible_at has passed, makes it running under a lease and
// counts an attempt; an expired lease is handed to the store's OnExpire,
// which records the failure and makes the message visible again (or
// dead-letters it).
var Lease = lease.Spec{
	Table:        "pipeline_jobs",
	ID:           "job_id",
	Status:       "status",
	WorkerID:     "worker_id",
	LeaseExpires: "lease_expires_at",
	HeartbeatAt:  "heartbeat_at",
	ClaimVersion: "claim_version",
	AttemptCount: "attempt_count",
	ReadyAt:      "visible_at",
	UpdatedAt:    "updated_at",
	Order:        "visible_at",
	ClaimByKey:   true, // finished jobs stay in the table
	Ready:        StatusQueued,
	Claimed:      StatusRunning,
	Leased:       []string{StatusRunning},
}
