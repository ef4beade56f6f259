package spool

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Tombstones. The mover deletes a capture entry from Redis only after the
// Add that spooled it committed; if that XDEL fails or the process dies
// before it, the next move reads the same entries again. The unique key
// skips those still spooled, but one the budget dropped meanwhile would be
// spooled again, at the tail, out of capture order, and then both shipped
// and counted in a gap. So a drop of one of the Add's own captures leaves a
// tombstone, and Add skips tombstoned captures. Skipping by capture id
// instead (everything up to the last id moved) is not safe: after a Redis
// flush a Jetson's clock can come up behind, and new entries would get
// ids below that mark and be lost.
//
// Moved deletes the tombstones once the entries left Redis, so the table
// holds about one move's worth. A crash between the XDEL and Moved leaves
// some behind, naming entries no longer on the capture stream. They go
// with the next move that read the whole stream: every entry on it then
// was in that move, and is gone after its XDEL. Not by age: an edge's
// clock can jump forward (a Jetson booted with a clock far behind, then
// set by NTP), and a tombstone pruned while its entry is still on the
// stream lets that entry be spooled again.

// entryKey is a capture entry's identity in the spool.
type entryKey struct{ job, entry string }

// skipTombstoned returns caps without the entries an earlier move of them
// dropped.
func (s *Spool) skipTombstoned(ctx context.Context, tx *sql.Tx, caps []jobs.Captured) ([]jobs.Captured, error) {
	if s.tombs == 0 {
		return caps, nil
	}
	dead, err := tombstones(ctx, tx)
	if err != nil {
		return nil, err
	}
	out := make([]jobs.Captured, 0, len(caps))
	for _, c := range caps {
		if !dead[entryKey{c.JobID, c.Entry}] {
			out = append(out, c)
		}
	}
	return out, nil
}

// tombstones reads the whole (small) table.
func tombstones(ctx context.Context, tx *sql.Tx) (map[entryKey]bool, error) {
	rs, err := tx.QueryContext(ctx, `SELECT job_id, entry_id FROM tombstones`)
	if err != nil {
		return nil, fmt.Errorf("read tombstones: %w", err)
	}
	defer rs.Close()
	out := map[entryKey]bool{}
	for rs.Next() {
		var k entryKey
		if err := rs.Scan(&k.job, &k.entry); err != nil {
			return nil, fmt.Errorf("read tombstones: %w", err)
		}
		out[k] = true
	}
	return out, rs.Err()
}

// tombstone records the drop of r when r is one of the Add's captures;
// a drop of an entry moved by an earlier, finished move needs none.
func (s *Spool) tombstone(ctx context.Context, tx *sql.Tx, d *dropper, r dropRow) error {
	if d.ownSet == nil {
		d.ownSet = make(map[entryKey]bool, len(d.own))
		for _, c := range d.own {
			if c.Type == DroppedType {
				d.ownSet[entryKey{c.JobID, c.Entry}] = true
			}
		}
	}
	if !d.ownSet[entryKey{r.job, r.ent}] {
		return nil
	}
	out, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO tombstones (job_id, entry_id, at_ms) VALUES (?, ?, ?)`,
		r.job, r.ent, s.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("tombstone %s/%s: %w", r.job, r.ent, err)
	}
	n, _ := out.RowsAffected()
	d.tombs += n
	return nil
}

// Moved tells the spool that caps, spooled by an Add, have been deleted
// from the capture stream: no move can read them again, so their
// tombstones go. drained says caps were all the stream held when read, so
// no capture entry a tombstone names is left on it: every tombstone goes.
// It costs nothing when no tombstone is left.
func (s *Spool) Moved(ctx context.Context, caps []jobs.Captured, drained bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tombs == 0 || (len(caps) == 0 && !drained) {
		return nil
	}
	var left int64
	err := sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		if drained {
			left = 0
			_, err := tx.ExecContext(ctx, `DELETE FROM tombstones`)
			return err
		}
		dead, err := tombstones(ctx, tx)
		if err != nil {
			return err
		}
		for _, c := range caps {
			k := entryKey{c.JobID, c.Entry}
			if !dead[k] {
				continue
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM tombstones WHERE job_id = ? AND entry_id = ?`, k.job, k.entry); err != nil {
				return err
			}
			delete(dead, k)
		}
		left = int64(len(dead))
		return nil
	})
	if err != nil {
		return fmt.Errorf("spool moved: %w", err)
	}
	s.tombs = left
	return nil
}
