package spool

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// An operator's command (euterpe-edge sync quarantine) opens the spool
// beside the running daemon. It changes nothing on open: no schema
// statement, whose upgrade is the daemon's to make, and no integrity
// check, which the daemon made when it opened the file. It keeps the
// smaller of its own budget and the one the daemon recorded, so a resend
// never fills the spool past what the daemon will hold.

// ErrNoSpool is matched by OpenExisting when there is no spool file.
var ErrNoSpool = errors.New("no spool file")

// ErrSchemaVersion is matched when the file is not at the schema version
// this program knows: written by another version of the edge, or never
// opened by the daemon.
var ErrSchemaVersion = errors.New("spool schema version")

// operatorBusy is how long an operator's command waits on the daemon's
// transactions before it gives up, changing nothing.
var operatorBusy = "busy_timeout(15000)"

// OpenExisting opens the spool file at path for an operator's command that
// writes to it: it neither creates a missing file (ErrNoSpool: a wrong
// state directory) nor sets a damaged one aside, which only the daemon
// does, at its next start.
func OpenExisting(ctx context.Context, path string, maxBytes int64) (*Spool, error) {
	return openExisting(ctx, path, maxBytes, asOperator)
}

// OpenReadOnly is OpenExisting for a command that only reads: its
// connection cannot write to the file.
func OpenReadOnly(ctx context.Context, path string) (*Spool, error) {
	return openExisting(ctx, path, 1, asReader)
}

func openExisting(ctx context.Context, path string, maxBytes int64, a access) (*Spool, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("spool %s: budget %d must be positive", path, maxBytes)
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("spool %s: %w", path, ErrNoSpool)
	} else if err != nil {
		return nil, fmt.Errorf("spool %s: %w", path, err)
	}
	return open(ctx, path, maxBytes, a)
}

// adoptDaemons checks the file is at the schema this program knows and
// lowers the budget to the daemon's, when it recorded one.
func (s *Spool) adoptDaemons(ctx context.Context) error {
	var v string
	if err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v != schemaVersion {
		return fmt.Errorf("%w: the file is at %s and this euterpe-edge knows %s: run the command of the euterpe-edge that runs as the daemon, once the daemon has opened the file",
			ErrSchemaVersion, v, schemaVersion)
	}
	// A daemon not restarted since the upgrade that added the table
	// recorded none.
	var tables int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'budget'`).Scan(&tables); err != nil {
		return fmt.Errorf("the daemon's budget: %w", err)
	}
	if tables == 0 {
		return nil
	}
	var recorded int64
	err := s.db.QueryRowContext(ctx, `SELECT max_bytes FROM budget WHERE id = 1`).Scan(&recorded)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("the daemon's budget: %w", err)
	case recorded > 0 && recorded < s.maxBytes:
		s.maxBytes = recorded
	}
	return nil
}

// refresh reads the cached totals from the file again when another
// connection committed to it since this one last looked, and publishes
// them. The caller holds mu and runs it first in its
// transaction, which no other connection can commit during; the totals
// are the file's as of that commit even if the caller's transaction then
// fails, so they are published at once, not with the caller's commit.
func (s *Spool) refresh(ctx context.Context, tx *sql.Tx) error {
	var v int64
	if err := tx.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
		return fmt.Errorf("data version: %w", err)
	}
	if v == s.dataVersion {
		return nil
	}
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0), (SELECT COUNT(*) FROM quarantine) FROM events`).
		Scan(&s.events, &s.bytes, &s.quarantined)
	if err != nil {
		return fmt.Errorf("count the spool again: %w", err)
	}
	oldest, err := oldestTS(ctx, tx)
	if err != nil {
		return fmt.Errorf("count the spool again: %w", err)
	}
	s.dataVersion = v
	s.publish(oldest)
	return nil
}
