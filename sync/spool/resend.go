package spool

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Resending. A quarantined item is kept with the body it was refused with:
// a batch as encoded when central refused it (400 invalid_batch, 413
// too_large), or the event's or gap's own JSON when the edge set it aside
// itself (CodeInvalidEvent, CodeInvalidGap). Once central is upgraded or
// fixed, Resend decodes those bodies back into spool rows and gaps and
// deletes the quarantine rows in the same transaction, so an item is
// either quarantined or spooled, never both and never neither. The rows
// take new seqs, after everything spooled: the sender ships them after
// newer events of the same jobs. Their entry ids, and so their event and
// gap ids, are the ones central refused, so a resend that reaches central
// twice is stored once.

// The codes under which the shipper quarantines an item it will not send
// (its body is then that item's JSON, not a batch).
const (
	CodeInvalidEvent = "invalid_event"
	CodeInvalidGap   = "invalid_gap"
)

var (
	// ErrNoSpool is matched by OpenExisting when there is no spool file.
	ErrNoSpool = errors.New("no spool file")
	// ErrNotQuarantined is matched when an id names no quarantined batch:
	// never one, or resent or pruned since.
	ErrNotQuarantined = errors.New("not in the quarantine")
	// ErrNotResendable is matched when a quarantined batch keeps nothing
	// that can be spooled again (an item the edge could not encode).
	ErrNotResendable = errors.New("keeps nothing to resend")
	// ErrOverBudget is matched when the items put back would take the
	// spool's events past its budget.
	ErrOverBudget = errors.New("over the spool's budget")
)

// OpenExisting opens the spool file at path for an operator's command run
// beside the daemon: it neither creates a missing file (ErrNoSpool: a
// wrong state directory) nor sets a damaged one aside, which only the
// daemon does, at its next start; and it skips the integrity check of
// every page, which the daemon made when it opened the file.
func OpenExisting(ctx context.Context, path string, maxBytes int64) (*Spool, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("spool %s: budget %d must be positive", path, maxBytes)
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("spool %s: %w", path, ErrNoSpool)
	} else if err != nil {
		return nil, fmt.Errorf("spool %s: %w", path, err)
	}
	return open(ctx, path, maxBytes, false)
}

// refresh reads the cached totals from the file again when another
// connection committed to it since this one last looked, and reports
// whether it did. The caller holds mu and runs it first in its
// transaction, which no other connection can commit during.
func (s *Spool) refresh(ctx context.Context, tx *sql.Tx) (bool, error) {
	var v int64
	if err := tx.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
		return false, fmt.Errorf("data version: %w", err)
	}
	if v == s.dataVersion {
		return false, nil
	}
	err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0), (SELECT COUNT(*) FROM quarantine) FROM events`).
		Scan(&s.events, &s.bytes, &s.quarantined)
	if err != nil {
		return false, fmt.Errorf("count the spool again: %w", err)
	}
	s.dataVersion = v
	return true, nil
}

// Resent reports what a Resend put back.
type Resent struct {
	IDs    []int64 // quarantine rows deleted, in id order
	Events int     // rows spooled again
	Gaps   int     // gaps spooled again
	Bytes  int64   // what the rows count against the budget
	// Kept are the rows ResendAll left in the quarantine because they
	// keep nothing to resend.
	Kept []int64
}

// Resend puts the items of the quarantined batches ids back into the
// spool, in one transaction, oldest batch first. Nothing changes when an
// id is not quarantined (ErrNotQuarantined), keeps nothing to resend
// (ErrNotResendable) or when the items would take the spool's events past
// its budget (ErrOverBudget): the budget makes room for new events by
// dropping old deltas, but an operator's resend is not worth a gap in
// events not yet sent, so it waits for room instead.
func (s *Spool) Resend(ctx context.Context, ids []int64) (Resent, error) {
	if len(ids) == 0 {
		return Resent{}, nil
	}
	return s.resend(ctx, ids)
}

// ResendAll is Resend of every quarantined batch that keeps something to
// resend; the others stay, listed in Kept.
func (s *Spool) ResendAll(ctx context.Context) (Resent, error) {
	return s.resend(ctx, nil)
}

// quarantined is a row of the quarantine table as Resend reads it.
type quarantined struct {
	id         int64
	code, body string
}

func (s *Spool) resend(ctx context.Context, ids []int64) (Resent, error) {
	all := ids == nil
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out Resent
	var events, bytes, oldest int64
	err := sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		out = Resent{}
		if _, err := s.refresh(ctx, tx); err != nil {
			return err
		}
		qs, err := readQuarantined(ctx, tx, ids)
		if err != nil {
			return err
		}
		if !all && len(qs) < len(ids) {
			return missing(ids, qs)
		}
		var rows []Row
		var gaps []Gap
		for _, q := range qs {
			r, g, err := itemsOf(q)
			switch {
			case err != nil && all:
				out.Kept = append(out.Kept, q.id)
				continue
			case err != nil:
				return err
			}
			rows, gaps = append(rows, r...), append(gaps, g...)
			out.IDs = append(out.IDs, q.id)
		}
		for _, r := range rows {
			out.Bytes += r.size()
		}
		if s.bytes+out.Bytes > s.maxBytes {
			return fmt.Errorf("%w: the spool's events take %d bytes and the %d batches' items %d more, past its budget of %d (EUTERPE_SYNC_SPOOL_MAX_MB); nothing was resent: resend fewer at a time, or once the spool has shipped its backlog",
				ErrOverBudget, s.bytes, len(out.IDs), out.Bytes, s.maxBytes)
		}
		if out.Events, err = insertRows(ctx, tx, rows); err != nil {
			return err
		}
		if out.Gaps, err = insertGaps(ctx, tx, gaps); err != nil {
			return err
		}
		for _, id := range out.IDs {
			if _, err := tx.ExecContext(ctx, `DELETE FROM quarantine WHERE id = ?`, id); err != nil {
				return err
			}
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0) FROM events`).Scan(&events, &bytes); err != nil {
			return err
		}
		oldest, err = oldestTS(ctx, tx)
		return err
	})
	if err != nil {
		return Resent{}, fmt.Errorf("spool resend: %w", err)
	}
	s.events, s.bytes = events, bytes
	s.quarantined -= int64(len(out.IDs))
	s.publish(oldest)
	return out, nil
}

// readQuarantined reads the quarantine rows ids (every row when ids is
// nil), in id order.
func readQuarantined(ctx context.Context, tx *sql.Tx, ids []int64) ([]quarantined, error) {
	q := `SELECT id, code, body FROM quarantine ORDER BY id`
	args := make([]any, len(ids))
	if ids != nil {
		for i, id := range ids {
			args[i] = id
		}
		q = `SELECT id, code, body FROM quarantine WHERE id IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + `) ORDER BY id`
	}
	rs, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []quarantined
	for rs.Next() {
		var r quarantined
		if err := rs.Scan(&r.id, &r.code, &r.body); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// missing is the ErrNotQuarantined of the ids qs lacks, naming a few.
func missing(ids []int64, qs []quarantined) error {
	var gone []string
	for _, id := range ids {
		if !slices.ContainsFunc(qs, func(q quarantined) bool { return q.id == id }) {
			gone = append(gone, strconv.FormatInt(id, 10))
		}
	}
	more := ""
	if len(gone) > 5 {
		more, gone = fmt.Sprintf(" and %d more", len(gone)-5), gone[:5]
	}
	return fmt.Errorf("%w: %s%s (resent or pruned since, or never quarantined); nothing was resent", ErrNotQuarantined, strings.Join(gone, ", "), more)
}

// itemsOf decodes a quarantined body into the rows and gaps it holds.
func itemsOf(q quarantined) ([]Row, []Gap, error) {
	if q.body == "" {
		return nil, nil, fmt.Errorf("quarantined batch %d (%s) %w: the edge kept no body", q.id, q.code, ErrNotResendable)
	}
	var b wire.Batch
	var err error
	switch q.code {
	case CodeInvalidEvent:
		b.Events = make([]wire.Event, 1)
		err = json.Unmarshal([]byte(q.body), &b.Events[0])
	case CodeInvalidGap:
		b.Dropped = make([]wire.Gap, 1)
		err = json.Unmarshal([]byte(q.body), &b.Dropped[0])
	default:
		err = json.Unmarshal([]byte(q.body), &b)
	}
	if err == nil && len(b.Events)+len(b.Dropped) == 0 {
		err = errors.New("no event or gap in it")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("quarantined batch %d (%s) %w: %v", q.id, q.code, ErrNotResendable, err)
	}
	rows := make([]Row, len(b.Events))
	for i, e := range b.Events {
		rows[i] = Row{JobID: e.JobID, Entry: e.EntryID, Type: e.Type, Step: e.Step, Task: e.Task, TS: e.TS,
			Data: string(wire.Sendable(e.Data))}
	}
	gaps := make([]Gap, len(b.Dropped))
	for i, g := range b.Dropped {
		gaps[i] = Gap{JobID: g.JobID, Type: g.Type, Count: g.Count, FirstEntry: g.FirstEntryID, LastEntry: g.LastEntryID,
			FirstTS: g.FirstTS, LastTS: g.LastTS}
	}
	return rows, gaps, nil
}

// insertRows spools rows after every row spooled, in their order, and
// returns how many are new: an entry spooled already is not spooled twice.
func insertRows(ctx context.Context, tx *sql.Tx, rows []Row) (int, error) {
	n := 0
	for i := 0; i < len(rows); i += insertChunk {
		chunk := rows[i:min(i+insertChunk, len(rows))]
		args := make([]any, 0, len(chunk)*8)
		for _, r := range chunk {
			args = append(args, r.JobID, r.Entry, r.Type, r.Step, r.Task, r.TS, r.Data, r.size())
		}
		res, err := tx.ExecContext(ctx, insertSQL(len(chunk)), args...)
		if err != nil {
			return 0, fmt.Errorf("spool %d events: %w", len(chunk), err)
		}
		k, _ := res.RowsAffected()
		n += int(k)
	}
	return n, nil
}

// insertGaps spools gaps sealed, as AddGaps does: each goes out as it is,
// under its old gap id.
func insertGaps(ctx context.Context, tx *sql.Tx, gaps []Gap) (int, error) {
	n := 0
	for _, g := range gaps {
		res, err := tx.ExecContext(ctx, `INSERT INTO gaps (job_id, type, count, first_entry_id, last_entry_id, first_ts, last_ts, sealed)
SELECT ?, ?, ?, ?, ?, ?, ?, 1 WHERE NOT EXISTS (SELECT 1 FROM gaps WHERE job_id = ? AND first_entry_id = ?)`,
			g.JobID, g.Type, g.Count, g.FirstEntry, g.LastEntry, g.FirstTS, g.LastTS, g.JobID, g.FirstEntry)
		if err != nil {
			return 0, fmt.Errorf("spool a gap of job %s: %w", g.JobID, err)
		}
		k, _ := res.RowsAffected()
		n += int(k)
	}
	return n, nil
}
