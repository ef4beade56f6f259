// Package jobs is the Redis data model of the edge job system: the queue
// stream jobs:stream read by the consumer group "workers", the per-job hash
// job:{id}, the per-job event stream job:{id}:events, idempotency records
// idempotency:{key} (the job id, as the contract says; the request
// fingerprint beside it in idempotency_fingerprint:{key}) and the
// dead-letter stream jobs:dead.
//
// The gateway creates jobs with Create (hash, initial "queued" event and the
// queue entry in one atomic script); workers move them with Transition and
// its shorthands SetRunning, Finish and AppendEvent. Every state change is a
// single Lua script that checks the current status against the Transitions
// table, updates the hash, appends the event, refreshes the TTL of both keys
// and optionally acknowledges the queue message — one round trip, atomic.
// Because a terminal status has no outgoing transition, the first of two
// racing terminal writes (a worker finishing while a client cancels) wins
// and the other is refused with ErrFinished, so each job gets exactly one
// terminal event. Only commands available in Redis 6.0 are used.
//
// A script is not rolled back when a command fails in it, so each checks
// the types of the keys it writes before its first write and refuses with
// ErrWrongType (a *WrongTypeError), writing nothing, when one holds another
// type; only the refresh of an idempotency record's TTL, which serves
// retries alone, is skipped instead (redis.pcall) and the write completes.
//
// The client resends a command whose reply was lost (a read timeout, a
// dropped connection), and Redis may have run it already. Every script
// writes once however often it is sent: a create finds the job it queued
// (extension field queued_ids of the hash) and a transition finds its
// token among the last ones the hash keeps (extension field applied, see
// Transition.Token); both answer as their first run did. A third
// extension field, HasIdempotencyField, says whether the job has an
// idempotency record for its writes to keep alive.
package jobs
