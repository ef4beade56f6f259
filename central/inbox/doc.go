// Package inbox is the transcode job queue of euterpe-central: the
// inbox_jobs table driven by the shared lease protocol (daemon/lease) and
// the job state machine of the contract as data (Transitions). Every status
// write goes through that table and inserts the job's next
// job_outbox_events row in the same transaction, numbered by a per-job
// sequence and carrying the webhook payload for that state: status and
// requester metadata for intermediate states, outputs for succeeded, a
// normalized {code, message} error for failed and dead_letter. Payloads never
// contain credentials.
//
// Failures follow the retry policy (Policy): retryable classes go back to
// queued after exponential backoff with full jitter (429 from a larger
// bucket), exhausted budgets end in dead_letter, and permanent errors end in
// failed. Executors (the transcode runner, tests) use Store.Claim, the
// Job methods and the credential accessors; the HTTP API uses Insert and Get.
package inbox
