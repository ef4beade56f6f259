package spool

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// errDamaged is what the open's integrity check found: pages no statement
// of the open itself read (an index, the gaps table) would otherwise fail
// every Add or Next from then on, at every start, with nothing set aside.
var errDamaged = errors.New("integrity check failed")

// Corrupt reports whether err, from Open or from any of the spool's
// operations, says the file itself is unreadable, as opposed to
// unreachable for now (locked, disk full, permissions).
func Corrupt(err error) bool {
	if errors.Is(err, errDamaged) {
		return true
	}
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

// MoveAside renames the spool file at path, and its -wal and -shm files
// when present, to <path>.<why>-<unix ms> and returns that name: a spool
// kept for an operator, never shipped, and out of the way of a fresh one.
// A path that is a link (sync.db on another card) is followed: the files
// are where it points, and the fresh spool is created there through it.
func MoveAside(path, why string, now time.Time) (string, error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	aside := fmt.Sprintf("%s.%s-%d", path, why, now.UnixMilli())
	// The WAL first: a database moved without its WAL would be opened by
	// the fresh spool's connection together with the old WAL.
	for _, suffix := range []string{"-wal", "-shm", ""} {
		if err := os.Rename(path+suffix, aside+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("set the spool aside (%s): %w", why, err)
		}
	}
	return aside, nil
}

// checkIntegrity runs SQLite's quick_check over the whole file; what it
// finds is errDamaged, with SQLite's first findings. (REINDEX cannot mend
// a damaged index page: it frees the old tree's pages first, and reading
// them fails the same way.)
func checkIntegrity(ctx context.Context, db *sql.DB) error {
	problems, err := quickCheck(ctx, db)
	if err != nil || len(problems) == 0 {
		return err
	}
	if len(problems) > 3 {
		problems = problems[:3]
	}
	return fmt.Errorf("%w: %s", errDamaged, strings.Join(problems, "; "))
}

// quickCheck returns what PRAGMA quick_check reports, nothing for a sound
// file. A page it cannot even read is an SQLITE_CORRUPT error instead.
func quickCheck(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, err
		}
		if line != "ok" {
			out = append(out, line)
		}
	}
	return out, rows.Err()
}
