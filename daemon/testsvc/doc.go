// Package testsvc finds the real services tests run against: Redis,
// Postgres, ffmpeg and the S3-compatible server. Their addresses come only
// from EUTERPE_TEST_* variables, which `scripts/services.sh up` sets (in
// .run/env) to private instances of the clone, or to servers the user
// named; there is no default address, because a server answering on the
// usual port may be a production one. A test that needs a service calls the
// helper here; when the service is not configured or does not answer, the
// test is skipped on a developer machine and fails when CI=true, so CI can
// never go green by skipping what it was meant to prove.
//
// Redis tests each get a logical database (1..15) that no other test on the
// machine holds at the same time: the database is locked with a key in
// database 0 (euterpe:testdb:<n>, SET NX with an expiry refreshed while the
// test runs, released when it ends), so packages tested in parallel never
// flush each other's keys. When all fifteen are held, Redis(t) waits.
// A database is flushed only while it holds nothing but test keys (it is
// empty, or marked in database 0 as written by tests); a server whose
// databases 1..15 hold anything else is refused with a ForeignKeysError
// and left untouched.
//
// EachRedis runs a test once per Redis server: the default one
// (EUTERPE_TEST_REDIS_URL) and a Redis 6.0 (EUTERPE_TEST_REDIS6_URL, built
// from source by scripts/services.sh), the version the edge must run on;
// Redis(t) inside it opens the subtest's server.
//
// Two stand-ins sit between a client and a real server: SilentServer takes
// connections and never answers (a hung endpoint), and LateProxy forwards
// to a real server but holds back one reply past the client's read
// timeout, after the server ran the request (a lost reply, which a client
// may answer by sending the request again).
package testsvc
