package jobs

import "github.com/vesta-cx/euterpe/daemon/lease"

// Key names of the edge streams contract.
const (
	// QueueStream is the shared queue the gateway XADDs to.
	QueueStream = "jobs:stream"
	// Group is the consumer group every worker reads QueueStream with.
	Group = "workers"
	// DeadStream holds queue messages that exhausted their deliveries.
	DeadStream = "jobs:dead"
	// CaptureStream is an extension key, not part of the edge streams
	// contract: when sync to central is on, every event the scripts write
	// to job:{id}:events is also appended here (fields job_id, entry, type,
	// step, ts, task, data) in the same script, and the sync shipper moves
	// the entries into its on-disk spool. Nothing writes it when sync is off.
	CaptureStream = "sync:events"
)

// JobKey is the hash holding the canonical job record.
func JobKey(id string) string { return "job:" + id }

// EventsKey is the per-job event stream SSE clients tail.
func EventsKey(id string) string { return "job:" + id + ":events" }

// CancelChannel is the pub/sub channel a cancel is published on (the message
// is the job id). Workers PSUBSCRIBE CancelPattern once per process.
func CancelChannel(id string) string { return "job:" + id + ":cancel" }

// CancelPattern matches every CancelChannel.
const CancelPattern = "job:*:cancel"

// IdempotencyKey maps a client's Idempotency-Key header to its job: it
// holds the job id, as the contract says.
func IdempotencyKey(key string) string { return idempotencyPrefix + key }

// IdempotencyFingerprintKey holds the fingerprint of the request that took
// IdempotencyKey(key), with the same TTL. Its prefix is not "idempotency:",
// so no client key can name it.
func IdempotencyFingerprintKey(key string) string { return idempotencyFingerprintPrefix + key }

// IdempotencyJobKey names, for a job created with an Idempotency-Key, that
// key, so that every write refreshing the job's TTL refreshes its record
// too: a job's TTL runs from its last event, and a record expiring while
// its job still lives would let a retry create a second job.
func IdempotencyJobKey(id string) string { return idempotencyJobPrefix + id }

// HasIdempotencyField is the job hash field a create sets to "1" when it
// wrote an idempotency record for the job (IdempotencyJobKey) and to "0"
// when it did not: the writes that refresh a job's TTL look the record up
// only for a job that has one, a lookup every transition of every job
// without a key would otherwise pay for. A hash without the field (written
// by an earlier version) is looked up as before.
const HasIdempotencyField = "idem"

const (
	idempotencyPrefix            = "idempotency:"
	idempotencyFingerprintPrefix = "idempotency_fingerprint:"
	idempotencyJobPrefix         = "idempotency_job:"
)

// Tasks are the task names the contract allows.
var Tasks = []string{"chat", "plan", "code", "tool", "rag", "embed"}

// ValidTask reports whether task is one of Tasks.
func ValidTask(task string) bool {
	for _, t := range Tasks {
		if t == task {
			return true
		}
	}
	return false
}

// Status is a job's status as stored in the hash field "status".
type Status = string

// Statuses of the contract.
const (
	Queued   Status = "queued"
	Running  Status = "running"
	Done     Status = "done"
	Error    Status = "error"
	Canceled Status = "canceled"
)

// Transitions is the job state machine. running -> running is allowed so a
// worker that reclaims the message of a crashed worker can restart the job;
// queued -> error lets a poison message be dead-lettered before it ran.
// Terminal states have no way out: that is what makes the terminal event
// unique and settles cancel-versus-finish races.
var Transitions = lease.Transitions{
	Machine:  "edge job",
	Terminal: []string{Done, Error, Canceled},
	Allowed: map[string][]string{
		Queued:  {Running, Canceled, Error},
		Running: {Running, Done, Error, Canceled},
	},
}

// IsTerminal reports whether an event type or status ends the job.
func IsTerminal(s string) bool { return Transitions.IsTerminal(s) }
