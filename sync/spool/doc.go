// Package spool is the edge's durable queue of job events on their way to
// central: a SQLite file (sync.db, WAL) in the state directory. The sync
// shipper moves captured events from Redis into it in one transaction per
// read, and deletes them from Redis only after that transaction commits, so
// a week offline lives on disk and not in the Jetson's shared memory, and
// survives reboots, restarts and a Redis flush.
//
// The spool is bounded by a byte budget over the events it holds. When an
// Add would exceed it, the oldest `delta` events are dropped first — never
// a lifecycle event (queued, running) or a terminal one (done, error,
// canceled) — and every drop is recorded as a gap per job, which the
// shipper reports to central in its next batch. One Add drops at most
// dropBatch events more than it spooled, so a budget lowered below a large
// spool is reached over the following moves, each a short transaction.
// Rows leave the spool when central accepted them (Ack) or refused them
// for good (Quarantine: kept in a table of their own for an operator, not
// retried). The operator puts quarantined items back with Resend (the
// command `euterpe-edge sync quarantine resend`, from another process
// beside the daemon); every transaction of a Spool first checks whether
// another connection committed to the file and then counts its totals
// again.
package spool
