// Package executor is the data plane of the edge library: it claims leased
// rows (scan, hash and delete jobs, thumbnails, thumbnail cleanup, WAL
// maintenance), heartbeats them while it works, and finishes them. It walks
// the library roots, streams files through BLAKE3 or SHA-256, renders
// thumbnails through the global I/O limiter, runs PRAGMA wal_checkpoint, and
// carries out deletions the policy side authorised: every file is pinned
// by its recorded path without following links, re-hashed from the opened
// descriptor, compared by device and inode with the kept files, and moved
// by name from its opened directory under a lock, with a last check that
// what moved is what was hashed. A re-run of a delete job finishes, or
// undoes, a move to a trash on another filesystem that a kill left at its
// hidden staging name (see recoverStaged). Between group cleanups the
// cleanup loop sweeps the thumbnails no request can reach any more, those
// of files gone from the catalog or of another format or size than the API
// asks for (SweepThumbnailsOnce).
//
// The executor writes to the job tables only the columns protocol §7
// whitelists for each path (claim, heartbeat, finish, recovery). Every such
// statement is built through Whitelists at package initialisation, so a
// statement naming another column cannot be compiled into the program, and
// it can only be run through exec/queryRow, which tag it with its path.
// Rows are fenced by worker_id (a token minted per claim), status='running'
// and an unexpired lease; a fenced write that matches no row returns
// *lease.StaleError.
//
// What the executor observes about files — the scan session and the files a
// scan saw, a digest, a file that changed under a delete, each delete
// decision — it hands to the Catalog interface declared here. The catalog
// is the policy side's (implemented by *store.Store, with its write paths
// listed in store.CatalogWrites); the executor never writes library_files,
// scan_sessions or delete_decisions with SQL of its own.
//
// GuardTriggers lets tests enforce both lists per write path: with
// Store.MarkPaths on, each executor or catalog write runs in a transaction
// that first records its (table, path) in the executor_path table, and the
// triggers abort an UPDATE that changes a column outside that one path's
// list (a claim writing progress, a heartbeat writing status, a hash record
// touching is_missing), a write under a path the table does not have, or an
// unmarked UPDATE outside the union of the table's paths.
package executor
