// Package peers holds no-op burn-downs of the job queues Euterpe is
// measured against, sized like Euterpe's own: River on Postgres (against
// central's inbox), Asynq on Redis (against the edge worker pool) and goqite
// on SQLite (against central's inbox on SQLite). It is a module of its own so
// the peers' dependencies never enter Euterpe's go.mod; `make bench-peers`
// runs each of these next to the matching Euterpe benchmark and prints the
// ratios, which on a shared machine mean more than either figure alone.
package peers
