package schema

import (
	"embed"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var files embed.FS

// Migrations is the central schema for sqldb.Migrate.
func Migrations() sqldb.Migrations {
	return sqldb.Embedded(files)
}

// Inbox job statuses (contract §3).
const (
	StatusQueued     = "queued"
	StatusClaimed    = "claimed"
	StatusFetching   = "fetching"
	StatusProcessing = "processing"
	StatusUploading  = "uploading"
	StatusSucceeded  = "succeeded"
	StatusFailed     = "failed"
	StatusDeadLetter = "dead_letter"
)

// InboxLease is the lease column spec of inbox_jobs.
var InboxLease = lease.Spec{
	Table:        "inbox_jobs",
	ID:           "id",
	Status:       "status",
	WorkerID:     "worker_id",
	LeaseExpires: "lease_expires_at",
	HeartbeatAt:  "heartbeat_at",
	ClaimVersion: "claim_version",
	AttemptCount: "attempt_count",
	ReadyAt:      "next_attempt_at",
	Sequence:     "event_seq",
	UpdatedAt:    "updated_at",
	Order:        "priority DESC, next_attempt_at, id",
	Ready:        StatusQueued,
	Claimed:      StatusClaimed,
	Leased:       []string{StatusClaimed, StatusFetching, StatusProcessing, StatusUploading},
	Requeue:      StatusQueued,
}

// Outbox event statuses. An event for a job without status_webhook_url is
// written as skipped: it is kept as the job's history but never delivered.
const (
	OutboxPending    = "pending"
	OutboxDelivering = "delivering"
	OutboxDelivered  = "delivered"
	OutboxDeadLetter = "dead_letter"
	OutboxSkipped    = "skipped"
)

// OutboxLease is the lease column spec of job_outbox_events. The
// dispatcher claims pending events whose next_attempt_at has come; an
// expired delivery lease returns its event to pending. attempt_count is the
// delivery attempt counter.
var OutboxLease = lease.Spec{
	Table:        "job_outbox_events",
	ID:           "event_id",
	Status:       "status",
	WorkerID:     "worker_id",
	LeaseExpires: "lease_expires_at",
	HeartbeatAt:  "heartbeat_at",
	ClaimVersion: "claim_version",
	AttemptCount: "attempt_count",
	ReadyAt:      "next_attempt_at",
	Order:        "next_attempt_at, job_id, sequence",
	Ready:        OutboxPending,
	Claimed:      OutboxDelivering,
	Leased:       []string{OutboxDelivering},
	Requeue:      OutboxPending,
}

// OutboxTransitions is the outbox event state machine.
var OutboxTransitions = lease.Transitions{
	Machine:  "job_outbox_events",
	Terminal: []string{OutboxDelivered, OutboxDeadLetter, OutboxSkipped},
	Allowed: map[string][]string{
		OutboxPending:    {OutboxDelivering},
		OutboxDelivering: {OutboxDelivered, OutboxPending, OutboxDeadLetter},
		OutboxDeadLetter: {OutboxPending}, // redrive (euterpe-central outbox redrive)
	},
}
