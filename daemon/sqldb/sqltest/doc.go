// Package sqltest runs one test body against both SQL engines: a fresh
// Postgres database from testsvc.Postgres and a SQLite file in t.TempDir().
// Every central queue test uses it, so the engines cannot drift apart.
package sqltest
