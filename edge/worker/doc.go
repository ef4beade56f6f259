// Package worker is the consumer side of the edge job queue: a pool that
// reads jobs:stream through the consumer group "workers", runs each job on
// the backend its task is bound to (package backend), and records the
// outcome in the job hash and event stream through package jobs, in the
// order the streams contract fixes: status running and a "running" event,
// the work (with coalesced "delta" events for streamed text), status done or
// error with the result or error, the terminal event, and only then XACK.
//
// One process is one consumer, named by its worker identity (stable across
// restarts, see daemon.PersistentWorkerID); EUTERPE_WORKERS jobs run at once
// inside it. Consumers of the group with no pending entries that have been
// idle for EUTERPE_CONSUMER_MAX_IDLE are deleted, never the pool's own. Reads and writes are batched: XREADGROUP COUNT
// fetches as many messages as there are free slots, their "running"
// transitions go out in one pipelined round trip, and finished jobs are
// written (terminal transition and XACK in one script per job) in pipelined
// batches, so a job costs about two round trips however small it is.
//
// Messages whose consumer died stay pending. A recovery loop claims entries
// idle longer than EUTERPE_CLAIM_IDLE, with XAUTOCLAIM where the server has
// it (Redis >= 6.2) and XPENDING+XCLAIM otherwise, and finishes them; the
// pool keeps its own in-flight entries fresh (an ownership-checked XCLAIM
// JUSTID at a third of the idle time), so a long job is not stolen from a
// live worker, and keeps a running job's keys from expiring. An outcome
// Redis cannot take is retried until Redis is back, the job keeping its
// slot and its heartbeat. A message delivered more than EUTERPE_MAX_DELIVERIES times is
// dead-lettered: the job ends as error max_deliveries_exceeded, a copy goes
// to jobs:dead, and the message is acknowledged. A message whose job has a
// status outside the state machine (or keys of the wrong type) is
// dead-lettered once with reason unknown_status, the job left untouched.
// One recovery pass walks the whole pending list before it ends. A job
// cancelled through the
// gateway is heard on the job:*:cancel pub/sub channel (with a status poll
// as safety net); its backend call is abandoned and the message acknowledged
// without a second terminal event.
package worker
