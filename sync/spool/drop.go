package spool

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// dropBatch is how many delta events one Add may drop beyond the number it
// spooled. A budget lowered below a large spool (a smaller
// EUTERPE_SYNC_SPOOL_MAX_MB at restart) is then worked off over the
// following moves, each a short transaction, instead of one that holds
// the spool, and the sender waiting on it, for as long as hundreds of
// thousands of drops take. Every Add still drops at least what it
// spooled, so a steady stream of captures never grows the spool.
const dropBatch = 2000

// dropRead is how many droppable rows one query reads.
const dropRead = 512

// dropper is the running account of one Add's drops.
type dropper struct {
	dropped int
	freed   int64
	// exhausted: no droppable event was left when the budget still
	// wanted room, as opposed to the Add having dropped its share.
	exhausted bool
}

type dropRow struct {
	seq      int64
	job, ent string
	typ      string
	ts, size int64
}

// dropOver deletes the oldest delta events past the in-flight ones until
// bytes fits the budget, none is left or limit are dropped, and records
// the gaps. The deletes are one statement per read of rows and the gaps
// one write per job, not a statement per row.
func (s *Spool) dropOver(ctx context.Context, tx *sql.Tx, bytes int64, limit int, d *dropper) error {
	after := s.inflight
	gaps := newGapBook()
	for bytes-d.freed > s.maxBytes && d.dropped < limit {
		rows, err := s.oldestDeltas(ctx, tx, after, min(dropRead, limit-d.dropped))
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			d.exhausted = true
			break
		}
		n := 0
		for _, r := range rows {
			if bytes-d.freed <= s.maxBytes {
				break
			}
			if err := gaps.add(ctx, tx, r); err != nil {
				return err
			}
			d.dropped++
			d.freed += r.size
			n++
		}
		// The rows read are the first deltas after `after`, in seq order,
		// and nothing else writes in this transaction: the range holds
		// exactly the n dropped.
		res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE type = ? AND seq > ? AND seq <= ?`, DroppedType, after, rows[n-1].seq)
		if err != nil {
			return err
		}
		if k, _ := res.RowsAffected(); k != int64(n) {
			return fmt.Errorf("drop deltas: deleted %d rows, want %d", k, n)
		}
		after = rows[n-1].seq
	}
	return gaps.flush(ctx, tx)
}

func (s *Spool) oldestDeltas(ctx context.Context, tx *sql.Tx, after int64, limit int) ([]dropRow, error) {
	rs, err := tx.QueryContext(ctx, `SELECT seq, job_id, entry_id, type, ts, size FROM events
WHERE type = ? AND seq > ? ORDER BY seq LIMIT ?`, DroppedType, after, limit)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []dropRow
	for rs.Next() {
		var r dropRow
		if err := rs.Scan(&r.seq, &r.job, &r.ent, &r.typ, &r.ts, &r.size); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// gapKey names a job's open gap of one event type.
type gapKey struct{ job, typ string }

// openGap is a gap as one Add's drops leave it; id 0 is not written yet.
type openGap struct {
	id              int64
	key             gapKey
	count           int64
	first, last     string
	firstTS, lastTS int64
	changed         bool
}

// gapBook keeps the gaps one Add's drops extend in memory and writes each
// once at the end, in the order the jobs first dropped.
type gapBook struct {
	open  map[gapKey]*openGap // nil: the job has no open gap
	order []gapKey
}

func newGapBook() *gapBook { return &gapBook{open: map[gapKey]*openGap{}} }

// add extends r's job's open (unsealed) gap with r, or opens one. Drops go
// oldest first and never touch rows in flight, so each comes after its
// job's open gap; should one ever come before the gap's last entry, it
// closes that gap (sealed: it goes out as it is) and opens the next one,
// so a gap stays a run of entries in order.
func (b *gapBook) add(ctx context.Context, tx *sql.Tx, r dropRow) error {
	k := gapKey{r.job, r.typ}
	g, seen := b.open[k]
	if !seen {
		var err error
		if g, err = openGapOf(ctx, tx, k); err != nil {
			return err
		}
		b.open[k] = g
		b.order = append(b.order, k)
	}
	if g != nil && entryBefore(g.last, r.ent) {
		g.count++
		g.last = r.ent
		g.firstTS, g.lastTS = min(g.firstTS, r.ts), max(g.lastTS, r.ts)
		g.changed = true
		return nil
	}
	if g != nil {
		if err := g.write(ctx, tx, true); err != nil {
			return err
		}
	}
	b.open[k] = &openGap{key: k, count: 1, first: r.ent, last: r.ent, firstTS: r.ts, lastTS: r.ts, changed: true}
	return nil
}

func (b *gapBook) flush(ctx context.Context, tx *sql.Tx) error {
	for _, k := range b.order {
		if g := b.open[k]; g != nil && g.changed {
			if err := g.write(ctx, tx, false); err != nil {
				return err
			}
		}
	}
	return nil
}

func openGapOf(ctx context.Context, tx *sql.Tx, k gapKey) (*openGap, error) {
	g := &openGap{key: k}
	err := tx.QueryRowContext(ctx, `SELECT id, count, first_entry_id, last_entry_id, first_ts, last_ts FROM gaps
WHERE job_id = ? AND type = ? AND sealed = 0`, k.job, k.typ).Scan(&g.id, &g.count, &g.first, &g.last, &g.firstTS, &g.lastTS)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return g, nil
}

func (g *openGap) write(ctx context.Context, tx *sql.Tx, seal bool) error {
	sealed := 0
	if seal {
		sealed = 1
	}
	var err error
	if g.id != 0 {
		_, err = tx.ExecContext(ctx, `UPDATE gaps SET count = ?, first_entry_id = ?, last_entry_id = ?, first_ts = ?, last_ts = ?, sealed = ?
WHERE id = ?`, g.count, g.first, g.last, g.firstTS, g.lastTS, sealed, g.id)
	} else {
		_, err = tx.ExecContext(ctx, `INSERT INTO gaps (job_id, type, count, first_entry_id, last_entry_id, first_ts, last_ts, sealed)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, g.key.job, g.key.typ, g.count, g.first, g.last, g.firstTS, g.lastTS, sealed)
	}
	if err != nil {
		return fmt.Errorf("record a gap of job %s: %w", g.key.job, err)
	}
	return nil
}

// entryBefore reports whether stream id a ("<ms>-<seq>") comes before b.
func entryBefore(a, b string) bool {
	am, as := splitEntry(a)
	bm, bs := splitEntry(b)
	return am < bm || (am == bm && as < bs)
}

func splitEntry(id string) (ms, seq uint64) {
	m, q, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(q, 10, 64)
	return ms, seq
}
