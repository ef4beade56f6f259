// Package e2e proves edge → central sync end to end with real processes: a
// built euterpe-edge on its own leased Redis database ships to a built
// euterpe-central on Postgres and on SQLite, and the tests read central's
// tables, its operator API and euterpectl's output to show that
//
//   - every event an edge wrote while central was down arrives exactly once,
//     in entry order per job, and every job ends `done` in edge_jobs;
//   - SIGKILL of the edge mid-shipping, or of central mid-ingest, loses
//     nothing and duplicates nothing;
//   - a full spool drops only deltas and central records the gap
//     (edge_gaps, the job's events in the operator API, edges.dropped_total);
//   - an edge signing with a clock two hours off is corrected by central's
//     Date header and still syncs (the shipper runs in the test process with
//     its clock seam, against the real central process);
//   - euterpectl edges list/jobs/events show the synced job.
//
// With the chaos build tag (`make chaos`, scripts/chaos.sh) it also holds
// the chaos runs of the edge (two edge processes on an AOF Redis of their
// own, SIGKILLed at random, Redis SIGKILLed once, SSE clients resuming
// with Last-Event-ID) and of sync (edge and central SIGKILLed at random
// while shipping), each audited into a table in .run/chaos/.
//
// The package has only tests; it builds the three programs once per run.
package e2e
