// Package testsvc finds the real services tests run against: Redis,
// Postgres, ffmpeg and the S3-compatible server that `scripts/services.sh`
// starts when the machine has none. A test that needs a service calls the
// helper here; when the service does not answer, the test is skipped on a
// developer machine and fails when CI=true, so CI can never go green by
// skipping what it was meant to prove.
//
// Redis tests each get a logical database (1..15) that no other test on the
// machine holds at the same time: the database is locked with a key in
// database 0 (euterpe:testdb:<n>, SET NX with an expiry refreshed while the
// test runs, released when it ends), so packages tested in parallel never
// flush each other's keys. When all fifteen are held, Redis(t) waits.
//
// EachRedis runs a test once per Redis server: the default one
// (EUTERPE_TEST_REDIS_URL) and a Redis 6.0 (EUTERPE_TEST_REDIS6_URL, built
// from source by scripts/services.sh), the version the edge must run on;
// Redis(t) inside it opens the subtest's server.
package testsvc
