// Package isolation holds the test that `make run` and the Redis test
// helpers leave alone a production Euterpe running on the same machine: it
// starts, in a network namespace of its own (so the production side can sit
// on the real defaults, Redis 127.0.0.1:6379 database 0, the edge on :8070,
// central on :8090), an edge with a queued job in jobs:stream and its
// consumer group, then runs `make run` (EUTERPE_RUN_ONCE=1) from a fresh
// copy of the repository's scripts and the Redis helpers, and checks the
// job, its stream entry and the group are exactly as they were. Another
// test brings two clones' services up at once, with the usual port taken by
// something that is not a Redis, and checks each gets its own.
package isolation
