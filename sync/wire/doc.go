// Package wire is the format in which euterpe-edge ships its job events
// upstream to euterpe-central: a Batch of Events, each carrying the edge's
// identity, the job id and the Redis stream entry id the event had on the
// edge. EventID joins the three, so it is stable across retries and a
// receiver that stores events keyed by it ingests every batch at most once,
// however often the edge resends it (at-least-once delivery, idempotent
// receiver). Batches are signed exactly like central's webhooks (the
// x-euterpe-* headers of central/webhook), so one verifier serves both.
//
// The edge-side shipper and the central-side ingest that use this format
// are not part of the module yet; this package fixes the format they share.
package wire
