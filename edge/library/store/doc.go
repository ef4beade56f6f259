// Package store owns library.db, the SQLite file in the state directory that
// holds every DedupFS table of the edge library: jobs (scan, hash, delete),
// scan_sessions, library_files, thumbnails, thumbnail_cleanup_jobs,
// io_rate_limits and wal_maintenance_jobs. It opens the file in WAL mode with
// modernc.org/sqlite, runs the versioned migrations that bring a fresh or a
// legacy database to the protocol (lowercase enums, the single-active
// scan/hash index, the duplicate-group indexes), enforces the legal value
// sets of the protocol with triggers, and provides the read side the HTTP API
// needs: keyset pagination of jobs, duplicate groups and group files, with
// their cursor and group_key codecs.
//
// The policy and executor packages write through their own statements; this
// package holds only what both sides share.
package store
