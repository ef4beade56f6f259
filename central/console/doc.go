// Package console is euterpe-central's web console at /ui/, built on the
// shared daemon/console layout: operator sign-in (an operator token
// exchanged for a database-backed session cookie, CSRF tokens bound to the
// session), transcode jobs with their webhook deliveries and the outbox
// dead letters (with redrive), the edge fleet from sync with a live tail,
// and the pipeline's jobs by day and symbol, its dead-letter queue (with
// redrive) and stored reports, plus charts of backlog, throughput and job
// durations kept in memory. It is a role: on by default, it adds its routes
// to the API server of a process that runs the api role, and shows the
// fleet and pipeline pages when those roles run in the same process (their
// routes and metrics are what the pages use). Everything is read through the
// stores of the other packages; no page shows an API key, a webhook secret,
// a storage credential or a sync secret.
package console
