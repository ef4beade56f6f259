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
// The policy and executor packages write the job tables through their own
// statements. This package also holds the catalog (catalog.go): the policy
// side's record of what the executor observed about files, reached by the
// executor only through its Catalog interface, with the columns each catalog
// write path may change listed in CatalogWrites. Write-path marks
// (pathmark.go) let tests' guard triggers check every such write against its
// own path.
package store
