// Package executor is the data plane of the edge library: it claims leased
// rows (scan, hash and delete jobs, thumbnails, thumbnail cleanup, WAL
// maintenance), heartbeats them while it works, and finishes them. It walks
// the library roots, streams files through BLAKE3 or SHA-256, renders
// thumbnails through the global I/O limiter, runs PRAGMA wal_checkpoint, and
// carries out deletions the policy side authorised, re-hashing every file
// right before it is moved to the trash.
//
// The executor writes to the job tables only the columns protocol §7
// whitelists for each path (claim, heartbeat, finish, recovery). Every such
// statement is built through Whitelists at package initialisation, so a
// statement naming another column cannot be compiled into the program, and
// GuardTriggers lets tests install triggers that abort any other column
// change. Rows are fenced by worker_id (a token minted per claim),
// status='running' and an unexpired lease; a fenced write that matches no
// row returns *lease.StaleError. Facts about files go through the store's
// catalog, never through the job tables.
package executor
