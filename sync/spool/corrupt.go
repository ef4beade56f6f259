package spool

import (
	"errors"
	"fmt"
	"os"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Corruption. A spool file SQLite cannot read (not a database, damaged
// pages: an SD card that lost writes in a power cut despite
// synchronous=FULL) would otherwise stop the edge at every start, job
// gateway and all, for a cache of events on their way to central. Open
// moves such a file aside, with its WAL and shared memory, under one name
// an operator can open with sqlite3, and starts an empty spool; the events
// in it are not shipped (the shipper logs the file's new name).

// corrupt reports whether err says the file itself is unreadable, as
// opposed to unreachable for now (locked, disk full, permissions).
func corrupt(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return true
	}
	return false
}

// setAside renames path, and its -wal and -shm files when present, to
// <path>.corrupt-<unix ms> and returns that name.
func setAside(path string, now time.Time) (string, error) {
	aside := fmt.Sprintf("%s.corrupt-%d", path, now.UnixMilli())
	// The WAL first: a database moved without its WAL would be opened by
	// the fresh spool's connection together with the old WAL.
	for _, suffix := range []string{"-wal", "-shm", ""} {
		if err := os.Rename(path+suffix, aside+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("set the corrupt spool aside: %w", err)
		}
	}
	return aside, nil
}
