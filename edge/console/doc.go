// Package console is euterpe-edge's web console at /ui/, built on
// daemon/console: the latest jobs with a live page per job (its events over
// the gateway's SSE endpoint, submit and cancel through /v1/jobs), queue
// health (backlog, pending, dead letters, workers and what they run,
// readiness of Redis and the library) and the media library's duplicate
// groups with thumbnails, deletion through the library API, scan progress
// and WAL state. It reads Redis and the library database directly and
// writes only through the daemon's existing APIs, from the browser. It
// also exports the queue's gauges to /metrics and keeps the last hour of
// backlog, throughput and run times in memory for its charts.
package console
