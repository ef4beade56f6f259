// Package testsvc finds the real services tests run against: Redis,
// Postgres, ffmpeg and the S3-compatible server that `scripts/services.sh`
// starts when the machine has none. A test that needs a service calls the
// helper here; when the service does not answer, the test is skipped on a
// developer machine and fails when CI=true, so CI can never go green by
// skipping what it was meant to prove.
package testsvc
