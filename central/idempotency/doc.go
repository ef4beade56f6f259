// Package idempotency makes POST /transcode safe to retry. A requester's
// Idempotency-Key is recorded in the idempotency_keys table with the hash
// of the request and the response it produced, in the same transaction as
// the job it created. A retry with the same key and hash gets the stored
// response (the same job_id); the same key with another hash is a
// conflict; concurrent identical requests create exactly one job, because
// the key's row is claimed with one INSERT … ON CONFLICT statement whose
// loser waits for, then reads, the winner's row. Keys expire after a TTL
// (default 24 h); an expired key is taken over by the next request and
// Purge deletes the rest.
package idempotency
