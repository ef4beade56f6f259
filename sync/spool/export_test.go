package spool

import (
	"context"
	"database/sql"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// SizeOf is what the budget counts for c once spooled.
func SizeOf(c jobs.Captured) int64 {
	return newRow(c).size()
}

// InFlight is the in-flight marker as the spool holds it in memory and in
// the file; the test fails on a mismatch through the second result.
func InFlight(ctx context.Context, s *Spool) (mem, file int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err = s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM inflight`).Scan(&file)
	return s.inflight, file, err
}

// Tombstones counts the tombstones table's rows once those Moved
// reported gone are deleted, as the next Add does.
func Tombstones(ctx context.Context, s *Spool) (n int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err = sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		left, err := s.settle(ctx, tx, s.tombs)
		if err != nil {
			return err
		}
		s.tombs, s.settled, s.settleAll = left, nil, false
		return tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM tombstones`).Scan(&n)
	})
	return n, err
}

// AgeTombstones makes every tombstone two weeks older, as a forward jump
// of the edge's clock does.
func AgeTombstones(ctx context.Context, s *Spool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.db.ExecContext(ctx, `UPDATE tombstones SET at_ms = at_ms - ?`, (14 * 24 * time.Hour).Milliseconds())
	return err
}

// QuarantineMessages are the quarantine table's messages, oldest first.
func QuarantineMessages(ctx context.Context, s *Spool) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs, err := s.db.QueryContext(ctx, `SELECT message FROM quarantine ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var m string
		if err := rs.Scan(&m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rs.Err()
}

// DropBatch is how many deltas one Add may drop beyond what it spooled.
const DropBatch = dropBatch

// Hold holds the spool's lock, as a long Add does, until release.
func Hold(s *Spool) (release func()) {
	s.mu.Lock()
	return s.mu.Unlock
}
