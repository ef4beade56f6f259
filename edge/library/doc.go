// Package library is the edge daemon's media library: it keeps library.db
// (SQLite, WAL) in the state directory and runs the DedupFS protocol on it
// — scanning the configured roots, hashing files, finding duplicate groups,
// rendering thumbnails, cleaning them up, deleting duplicates the user
// chose, and checkpointing its own WAL — all as leased jobs.
//
// The sub-packages keep the protocol's boundary visible: policy decides
// (admission, scheduling, retries, recovery, deletion authorisation),
// executor does (and writes only the columns protocol §7 whitelists),
// store holds the schema, migrations and read queries, pathsafe confines
// every path to the roots and the state directory, watch turns filesystem
// events into scans, and api serves it all under /api/v1. This package wires
// them together from Settings and exposes Mount and Run to the daemon.
package library
