// Package outbox delivers job_outbox_events to requesters' status webhooks
// (contract §8, §12). Every job transition writes an event in the same
// transaction as the transition; the dispatcher, a role of every
// euterpe-central pod, claims due events under the shared lease protocol
// (daemon/lease: atomic claim, lease TTL, heartbeat, reclaim on expiry,
// claim_version fencing), signs each attempt with the requester's secret
// (central/webhook), sends it through the SSRF-guarded client (central/ssrf)
// and records the outcome with a fenced write.
//
// Delivery is at least once: a dispatcher that dies mid-batch leaves its
// leases to expire and another one sends the same event_id again. Events of
// one job go out one at a time, in sequence order: an event is claimable
// only while no other event of its job is being delivered and no earlier
// one is pending (a redriven event waits for a later one in flight). Failures are
// retried with exponential backoff and full jitter, 429/503 from a larger
// bucket that a longer Retry-After extends, 410 Gone and refused addresses
// dead-letter at once, and an
// event that exhausts its attempts or age moves to the outbox dead-letter,
// from which Redrive puts it back.
//
// A poll with a jittered 500–1500 ms interval finds due events; a wake-up
// (Postgres LISTEN/NOTIFY fed by an insert trigger, on SQLite a watch of
// PRAGMA data_version, which changes on every commit by another connection
// or process, and on either engine Wake, which serve calls after an inbox
// commit that wrote events) starts a claim as soon as a new event commits.
package outbox
