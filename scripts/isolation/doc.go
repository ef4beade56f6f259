// Package isolation holds the test that `make run` and the Redis test
// helpers leave alone a production Euterpe running on the same machine: it
// starts, in a network namespace of its own (so the production side can sit
// on the real defaults, Redis 127.0.0.1:6379 database 0, the edge on :8070,
// central on :8090), an edge with a queued job in jobs:stream and its
// consumer group, then runs `make run` (EUTERPE_RUN_ONCE=1) from a fresh
// copy of the repository's scripts and the Redis helpers, and checks the
// job, its stream entry and the group are exactly as they were. Another
// test brings two clones' services up at once, with the usual port taken by
// something that is not a Redis, and checks each gets its own. The rest
// drive scripts/services.sh in scratch clones: Postgres for a clone under a
// 0700 directory, pid files naming a process that is not a server of the
// clone, no server holding the port lock, a Redis older than 7, and the
// programs `up tools` and `up run-tools` ask for.
package isolation
