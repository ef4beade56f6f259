// Package wire is the format in which euterpe-edge ships its job events
// upstream to euterpe-central: a Batch of Events, each carrying the edge's
// identity, the job id and the Redis stream entry id the event had on the
// edge. EventID joins the three, so it is stable across retries and a
// receiver that stores events keyed by it ingests every batch at most once,
// however often the edge resends it (at-least-once delivery, idempotent
// receiver). A batch also reports Gaps — delta events the edge dropped from
// a full spool — under ids just as stable, and the edge's heartbeat is a
// Status. Bodies are gzip-compressed and signed over the compressed bytes
// exactly like central's webhooks (the x-euterpe-* headers of
// central/webhook), with the edge id in a header of its own, so central
// checks the signature before it inflates anything and caps what it
// inflates. The edge's shipper and central's ingest are the two ends.
package wire
