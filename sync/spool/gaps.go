package spool

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// AddGaps adds gaps recorded outside the spool (deltas the capture cap
// kept out of Redis) in one transaction, sealed: each is a whole run
// already, so the spool's own drops never extend it. A gap of the same job
// and first entry already spooled is skipped, so adding the same gaps
// again changes nothing until central accepted them; after that they are
// sent again under the same gap id, which central deduplicates. It
// returns how many it added.
func (s *Spool) AddGaps(ctx context.Context, gaps []Gap) (int, error) {
	if len(gaps) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var added int
	err := sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		added = 0
		for _, g := range gaps {
			res, err := tx.ExecContext(ctx, `INSERT INTO gaps (job_id, type, count, first_entry_id, last_entry_id, first_ts, last_ts, sealed)
SELECT ?, ?, ?, ?, ?, ?, ?, 1 WHERE NOT EXISTS (SELECT 1 FROM gaps WHERE job_id = ? AND first_entry_id = ?)`,
				g.JobID, g.Type, g.Count, g.FirstEntry, g.LastEntry, g.FirstTS, g.LastTS, g.JobID, g.FirstEntry)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			added += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("spool %d gaps: %w", len(gaps), err)
	}
	return added, nil
}
