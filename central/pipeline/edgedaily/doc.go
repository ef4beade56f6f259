// Package edgedaily is the built-in pipeline job type edge_daily: for one
// edge (symbol) and one UTC day (asof) it fetches the job events the edge
// synced to central, turns them into a per-task report (job counts by
// outcome, running-to-terminal durations p50/p95, error-code tallies, dead
// letters), checks the report's invariants and stores it as JSON and CSV
// at a deterministic key.
//
// A report stands for good once it succeeded, so a day that has ended is
// read only once the edge has delivered past its end — an event of it
// stamped after the end has arrived, or a heartbeat sent after the end
// reports no spooled event from before it; until then fetch fails
// UPSTREAM_INCOMPLETE, retried. A report of today is the day so far, by
// request. An edge central has never heard from stays UPSTREAM_EMPTY.
package edgedaily
