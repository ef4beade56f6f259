// Package edgedaily is the built-in pipeline job type edge_daily: for one
// edge (symbol) and one UTC day (asof) it fetches the job events the edge
// synced to central, turns them into a per-task report (job counts by
// outcome, running-to-terminal durations p50/p95, error-code tallies, dead
// letters), checks the report's invariants and stores it as JSON and CSV
// at a deterministic key.
package edgedaily
