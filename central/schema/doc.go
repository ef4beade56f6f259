// Package schema holds euterpe-central's database schema: embedded goose
// migrations, one directory per engine (migrations/postgres and
// migrations/sqlite, kept column for column in step), and the lease column
// specs of the two leased tables, inbox_jobs and job_outbox_events. Every
// time column is a BIGINT of Unix microseconds on both engines.
//
// Version ranges keep independently maintained sets from colliding:
// 00001–00099 core (inbox, outbox, idempotency, requesters, here),
// 00100–00149 webhook delivery (central/outbox), 00150–00199 operators
// (central/operators), 00300–00399 sync ingest (sync/ingest), 00400–00499
// pipeline (central/pipeline). Each version exists in both directories
// with the same number. euterpe-central applies every set together
// (out-of-order versions allowed); migrate_test.go checks that a second run
// is a no-op, that every down undoes its up, and that a database holding
// only the first version of each set, with rows, upgrades in place.
package schema
