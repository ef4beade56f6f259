// Package schema holds euterpe-central's database schema: embedded goose
// migrations, one directory per engine (migrations/postgres and
// migrations/sqlite, kept column for column in step), and the lease column
// specs of the two leased tables, inbox_jobs and job_outbox_events. Every
// time column is a BIGINT of Unix microseconds on both engines.
//
// Version ranges keep independently maintained parts from colliding:
// 00001–00099 core (inbox, outbox, idempotency, requesters), 00100–00199
// transcode execution, 00200–00299 webhook delivery, 00300+ later parts.
// Each version exists in both directories with the same number.
package schema
