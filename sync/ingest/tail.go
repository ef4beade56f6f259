package ingest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TailCursor is a position in the fleet tail.
//
// On SQLite writers take turns, so seq order is commit order and the
// cursor is a seq. On Postgres identity values are drawn before commit, so
// a smaller seq can become visible after a larger one; there the tail
// walks rows in (xid, seq) order, xid being the inserting transaction's
// id, and only up to the horizon pg_snapshot_xmin(pg_current_snapshot()):
// every transaction below it has ended, so no row can appear behind the
// cursor later. Rows still go out with their seq as SSE id; a resume from
// an id the tail sent looks the row's xid up again. A seq from elsewhere
// (the operator API reads above the horizon) resumes from the horizon
// recorded when its row was inserted (see TailStartAnySeq).
type TailCursor struct {
	XID string // Postgres: xid8 as decimal text; "0" before any row
	Seq int64
}

// TailStart is the cursor a tail begins at: after the event whose seq is
// lastSeq as this tail sent it (Last-Event-ID), or (lastSeq < 0) at the
// current end of the table. A resume from an event since removed by
// retention starts at the first retained event with a larger seq.
//
// The tail sent that event once every transaction with a smaller xid had
// ended, so resuming at (xid, seq) skips nothing and repeats nothing. A
// row at or above the current horizon was not sent by a tail (the
// operator API reads above it): it resumes as TailStartAnySeq does.
func (s *Store) TailStart(ctx context.Context, lastSeq int64) (TailCursor, error) {
	return s.tailStart(ctx, lastSeq, false)
}

// TailStartAnySeq is the cursor a tail begins at after any event's seq,
// one read from the operator API say (?last_event_id=). That API reads
// rows above the horizon: when the client read the event a transaction
// with a smaller xid may have been open, to commit after the read, and a
// cursor at the event's (xid, seq) would skip its rows for good. Every
// such transaction was already open when the event's insert took its
// snapshot, so its xid is at or above the horizon recorded there
// (xmin_at_insert): the tail resumes from that horizon, sending again the
// rows from there on that the client may already have, ids unchanged (at
// least once). On SQLite it is TailStart.
func (s *Store) TailStartAnySeq(ctx context.Context, seq int64) (TailCursor, error) {
	return s.tailStart(ctx, seq, true)
}

func (s *Store) tailStart(ctx context.Context, lastSeq int64, anySeq bool) (TailCursor, error) {
	if s.db.Engine != sqldb.Postgres {
		if lastSeq >= 0 {
			return TailCursor{Seq: lastSeq}, nil
		}
		var seq int64
		err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM edge_events`).Scan(&seq)
		return TailCursor{Seq: seq}, wrapTail(err)
	}
	c := TailCursor{XID: "0"}
	var err error
	switch {
	case lastSeq < 0:
		err = s.db.QueryRowContext(ctx, `SELECT xid::text, seq FROM edge_events
			WHERE xid < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY xid DESC, seq DESC LIMIT 1`).Scan(&c.XID, &c.Seq)
	case lastSeq == 0:
		return c, nil
	default:
		// A row stored before xmin_at_insert existed has no recorded
		// horizon: it resumes at its own xid, or at the current horizon
		// when that is lower.
		var from string
		var sent bool
		err = s.db.QueryRowContext(ctx, `SELECT xid::text, xid < pg_snapshot_xmin(pg_current_snapshot()),
			LEAST(xid, COALESCE(xmin_at_insert, pg_snapshot_xmin(pg_current_snapshot())))::text
			FROM edge_events WHERE seq = $1`, lastSeq).Scan(&c.XID, &sent, &from)
		if err == nil {
			if sent && !anySeq {
				c.Seq = lastSeq
				return c, nil
			}
			return TailCursor{XID: from}, nil // (xid, seq) > (from, 0): every row from that xid on
		}
		if errors.Is(err, sql.ErrNoRows) {
			var seq int64
			// Only below the horizon, as TailPage reads: a row above it may
			// have committed ahead of one with a smaller xid still open,
			// which a cursor taken from it would skip for good.
			err = s.db.QueryRowContext(ctx, `SELECT xid::text, seq FROM edge_events
				WHERE seq > $1 AND xid < pg_snapshot_xmin(pg_current_snapshot()) ORDER BY xid, seq LIMIT 1`,
				lastSeq).Scan(&c.XID, &seq)
			c.Seq = seq - 1
			if errors.Is(err, sql.ErrNoRows) {
				return s.tailStart(ctx, -1, false) // nothing after it yet: from the current end
			}
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return TailCursor{XID: "0"}, nil // empty table
	}
	return c, wrapTail(err)
}

func wrapTail(err error) error {
	if err != nil {
		return fmt.Errorf("ingest: tail: %w", err)
	}
	return nil
}

// TailPage returns up to limit events after c that are safe to send (see
// TailCursor) and the cursor after them.
func (s *Store) TailPage(ctx context.Context, c TailCursor, limit int) ([]EventView, TailCursor, error) {
	var rows *sql.Rows
	var err error
	if s.db.Engine == sqldb.Postgres {
		rows, err = s.db.QueryContext(ctx, `SELECT `+eventColumns+`, xid::text FROM edge_events
			WHERE (xid, seq) > ($1::text::xid8, $2) AND xid < pg_snapshot_xmin(pg_current_snapshot())
			ORDER BY xid, seq LIMIT $3`, c.XID, c.Seq, limit)
	} else {
		rows, err = s.db.QueryContext(ctx, `SELECT `+eventColumns+`, '' FROM edge_events WHERE seq > ? ORDER BY seq LIMIT ?`, c.Seq, limit)
	}
	if err != nil {
		return nil, c, wrapTail(err)
	}
	defer rows.Close()
	var out []EventView
	for rows.Next() {
		var xid string
		e, err := scanEvent(rows, &xid)
		if err != nil {
			return nil, c, wrapTail(err)
		}
		out = append(out, e)
		c.Seq = e.Seq
		if xid != "" {
			c.XID = xid
		}
	}
	return out, c, wrapTail(rows.Err())
}

// parseLastEventID reads an SSE resume id: a seq.
func parseLastEventID(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("Last-Event-ID must be an event seq (a non-negative integer)")
	}
	return n, nil
}

// wakeup lets the batch handler tell this process's tails that new rows
// committed; tails of other pods find them by polling.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

func newWakeup() *wakeup { return &wakeup{ch: make(chan struct{})} }

// C is closed at the next Notify.
func (w *wakeup) C() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// Notify wakes every waiter.
func (w *wakeup) Notify() {
	w.mu.Lock()
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}
