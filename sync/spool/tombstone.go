package spool

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Tombstones. The mover deletes a capture entry from Redis only after the
// Add that spooled it committed; if that XDEL fails or the process dies
// before it, the next move reads the same entries again. By then the
// sender may have shipped them and the spool deleted them, or the budget
// dropped them: spooled again, they would be shipped twice, and, once the
// budget dropped them, counted in a gap of events central has. So every
// capture an Add takes (spooled or not) leaves a tombstone in the same
// transaction, and Add skips tombstoned captures: a move is done once,
// whether or not its XDEL happened. Skipping by capture id instead
// (everything up to the last id moved) is not safe: after a Redis flush a
// Jetson's clock can come up behind, and new entries would get ids below
// that mark and be lost.
//
// Moved reports the entries gone from Redis; their tombstones are deleted
// by the next Add, in its transaction (no write of its own per move). A
// crash before that leaves some behind, naming entries no longer on the
// capture stream (entry ids are per job stream, job ids are UUIDs: they
// never match a new capture). They go with the next move that read the
// whole stream: every entry on it then was in that move, and is gone after
// its XDEL. Not by age: an edge's clock can jump forward (a Jetson booted
// with a clock far behind, then set by NTP), and a tombstone pruned while
// its entry is still on the stream lets that entry be spooled again.

// entryKey is a capture entry's identity in the spool.
type entryKey struct{ job, entry string }

// tombChunk is the most tombstones one statement writes or deletes.
const tombChunk = 64

// skipTombstoned returns caps without the entries an earlier move took.
func (s *Spool) skipTombstoned(ctx context.Context, tx *sql.Tx, caps []jobs.Captured, tombs int64) ([]jobs.Captured, error) {
	if tombs == 0 {
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

// bury tombstones caps and returns how many tombstones are new.
func (s *Spool) bury(ctx context.Context, tx *sql.Tx, caps []jobs.Captured) (int64, error) {
	at := s.Now().UnixMilli()
	var n int64
	for i := 0; i < len(caps); i += tombChunk {
		chunk := caps[i:min(i+tombChunk, len(caps))]
		args := make([]any, 0, len(chunk)*3)
		for _, c := range chunk {
			args = append(args, c.JobID, c.Entry, at)
		}
		out, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO tombstones (job_id, entry_id, at_ms) VALUES `+
			strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", len(chunk)), ", "), args...)
		if err != nil {
			return 0, fmt.Errorf("tombstone %d captures: %w", len(chunk), err)
		}
		k, _ := out.RowsAffected()
		n += k
	}
	return n, nil
}

// settle deletes the tombstones Moved reported gone from the capture
// stream and returns how many are left. The caller holds mu.
func (s *Spool) settle(ctx context.Context, tx *sql.Tx, tombs int64) (int64, error) {
	switch {
	case tombs == 0:
		return 0, nil
	case s.settleAll:
		_, err := tx.ExecContext(ctx, `DELETE FROM tombstones`)
		return 0, err
	}
	for i := 0; i < len(s.settled); i += tombChunk {
		chunk := s.settled[i:min(i+tombChunk, len(s.settled))]
		args := make([]any, 0, len(chunk)*2)
		for _, k := range chunk {
			args = append(args, k.job, k.entry)
		}
		out, err := tx.ExecContext(ctx, `DELETE FROM tombstones WHERE (job_id, entry_id) IN (VALUES `+
			strings.TrimSuffix(strings.Repeat("(?, ?), ", len(chunk)), ", ")+`)`, args...)
		if err != nil {
			return 0, fmt.Errorf("settle tombstones: %w", err)
		}
		k, _ := out.RowsAffected()
		tombs -= k
	}
	return tombs, nil
}

// Moved tells the spool that caps, taken by an Add, have been deleted
// from the capture stream: no move can read them again, so their
// tombstones go, with the next Add (no write of its own per move).
// drained says caps were all the stream held when read, so no capture
// entry a tombstone names is left on it: every tombstone goes. A drained
// move of nothing finds the mover idle: the tombstones go at once, so a
// quiet spool holds none.
func (s *Spool) Moved(ctx context.Context, caps []jobs.Captured, drained bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case drained:
		s.settleAll, s.settled = true, nil
	case !s.settleAll:
		for _, c := range caps {
			s.settled = append(s.settled, entryKey{c.JobID, c.Entry})
		}
	}
	if !drained || len(caps) > 0 || s.tombs == 0 {
		return nil
	}
	err := sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		_, err := s.settle(ctx, tx, s.tombs)
		return err
	})
	if err != nil {
		return fmt.Errorf("spool moved: %w", err)
	}
	s.tombs, s.settleAll = 0, false
	return nil
}
