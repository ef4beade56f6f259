package ingest

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// pruneBatch is how many rows one delete removes, so no transaction (and,
// on SQLite, no turn of the single writer) runs long.
const pruneBatch = 2000

// Pruned counts what a Prune deleted, by table.
type Pruned struct{ Events, Gaps, Jobs int64 }

// Prune deletes what retention no longer keeps: events received before
// cutoff, gaps received before it, and job summaries whose last activity
// (the last batch that touched them) is before it. It deletes in batches
// until nothing is left or ctx ends. The edges' lifetime counters
// (events_total, dropped_total) stay.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (Pruned, error) {
	var p Pruned
	at := sqldb.Micros(cutoff)
	for _, t := range []struct {
		n   *int64
		sql string
	}{
		{&p.Events, `DELETE FROM edge_events WHERE seq IN (SELECT seq FROM edge_events WHERE received_at < ? LIMIT ?)`},
		{&p.Gaps, `DELETE FROM edge_gaps WHERE gap_id IN (SELECT gap_id FROM edge_gaps WHERE received_at < ? LIMIT ?)`},
		{&p.Jobs, `DELETE FROM edge_jobs WHERE (edge_id, job_id) IN (SELECT edge_id, job_id FROM edge_jobs WHERE updated_at < ? LIMIT ?)`},
	} {
		for ctx.Err() == nil {
			var n int64
			err := s.db.Tx(ctx, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, s.db.Rebind(t.sql), at, pruneBatch)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return p, fmt.Errorf("ingest: prune: %w", err)
			}
			*t.n += n
			if n < pruneBatch {
				break
			}
		}
	}
	return p, ctx.Err()
}
