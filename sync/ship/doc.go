// Package ship is the edge side of sync to central. A Shipper runs three
// loops: the mover takes captured events off the Redis capture stream
// (jobs.CaptureStream) into the on-disk spool (package spool), deleting them
// from Redis only after the spool commits; the sender posts the spool's
// oldest events, in capture order, as signed gzip batches of the sync/wire
// format to central, and deletes them once central accepted them; the
// heartbeat posts the edge's status every interval. While the edge's
// workers have work (Config.Busy) the mover and the sender yield: one batch
// each per YieldPace, the mover at full speed past YieldCeiling captured
// entries, both at full speed once the edge is idle.
//
// Central's answers are acted on from a table (outcomes): 2xx carrying
// central's batch result (every event sent accounted for) deletes the
// batch; 400 invalid_batch and 413 too_large split it (central stores a
// batch whole or not at all) down to the refused item, which alone is
// quarantined; a 413 that is not central's (a proxy's body limit) splits
// it too, cuts later batches below the size refused, and backs off, never
// quarantining, when one item alone is refused; 400 unsupported_format (a
// central older than the edge's format) keeps the batch and backs off,
// never splitting or quarantining; 429/503 wait for
// Retry-After; a 401 clock_skew corrects the signing clock from central's
// Date header; other 401/403 are logged once and retried slowly;
// everything else (network errors, 5xx, a 2xx or 400 that is not
// central's answer) backs off exponentially with full jitter, a timed-out
// batch halved for the next attempt. Nothing the shipper meets stops the
// daemon: the edge serves while central is away, and NewOpening's spool
// that cannot be opened is retried while the jobs run. NewOpening's spool
// is shipped only under the edge id its events were captured under
// (EdgeIDFile): one captured under another id is set aside at start.
package ship
