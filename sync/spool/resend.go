package spool

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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

// decoded is a quarantined batch's items, ready to spool.
type decoded struct {
	id   int64
	rows []Row
	gaps []Gap
}

// idChunk is the most ids one statement names, far below SQLite's limit
// on variables.
const idChunk = 500

func (s *Spool) resend(ctx context.Context, ids []int64) (Resent, error) {
	all := ids == nil
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	s.mu.Lock()
	defer s.mu.Unlock()
	// The bodies are read and decoded before the write transaction, which
	// then only checks they are still quarantined: a body is never changed
	// once written, and the daemon waits on the transaction, up to its
	// busy timeout, for as long as it lasts.
	qs, err := readQuarantined(ctx, s.db, ids)
	if err != nil {
		return Resent{}, fmt.Errorf("spool resend: %w", err)
	}
	if !all && len(qs) < len(ids) {
		return Resent{}, fmt.Errorf("spool resend: %w", missing(ids, idsOf(qs)))
	}
	var kept []int64
	var ds []decoded
	for _, q := range qs {
		rows, gaps, err := itemsOf(q)
		switch {
		case err != nil && all:
			kept = append(kept, q.id)
		case err != nil:
			return Resent{}, fmt.Errorf("spool resend: %w", err)
		default:
			ds = append(ds, decoded{id: q.id, rows: rows, gaps: gaps})
		}
	}
	out := Resent{Kept: kept}
	if len(ds) == 0 {
		return out, nil
	}
	var events, bytes, oldest int64
	err = sqldb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		out = Resent{Kept: kept}
		if err := s.refresh(ctx, tx); err != nil {
			return err
		}
		wanted := make([]int64, len(ds))
		for i, d := range ds {
			wanted[i] = d.id
		}
		still, err := quarantinedIDs(ctx, tx, wanted)
		if err != nil {
			return err
		}
		if !all && len(still) < len(wanted) {
			return missing(wanted, still)
		}
		var rows []Row
		var gaps []Gap
		for _, d := range ds {
			if _, ok := slices.BinarySearch(still, d.id); ok {
				rows, gaps = append(rows, d.rows...), append(gaps, d.gaps...)
				out.IDs = append(out.IDs, d.id)
			}
		}
		for _, r := range rows {
			out.Bytes += r.size()
		}
		if s.bytes+out.Bytes > s.maxBytes {
			return fmt.Errorf("%w: the spool's events take %d bytes and the %d batches' items %d more, past its budget of %d (EUTERPE_SYNC_SPOOL_MAX_MB, the daemon's or this command's, the smaller); nothing was resent: resend fewer at a time, or once the spool has shipped its backlog",
				ErrOverBudget, s.bytes, len(out.IDs), out.Bytes, s.maxBytes)
		}
		if out.Events, err = insertRows(ctx, tx, rows); err != nil {
			return err
		}
		if out.Gaps, err = insertGaps(ctx, tx, gaps); err != nil {
			return err
		}
		for ch := range slices.Chunk(out.IDs, idChunk) {
			if _, err := tx.ExecContext(ctx, `DELETE FROM quarantine WHERE id IN (`+params(len(ch))+`)`, anys(ch)...); err != nil {
				return err
			}
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(size), 0) FROM events`).Scan(&events, &bytes); err != nil {
			return err
		}
		oldest, err = oldestTS(ctx, tx)
		return err
	})
	if sqldb.OutageReason(err) == sqldb.ReasonLocked {
		return Resent{}, fmt.Errorf("spool resend: the daemon kept the spool busy past the busy timeout; nothing was resent: run the command again: %w", err)
	}
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
func readQuarantined(ctx context.Context, db *sql.DB, ids []int64) ([]quarantined, error) {
	if ids == nil {
		return scanQuarantined(ctx, db, `SELECT id, code, body FROM quarantine ORDER BY id`)
	}
	var out []quarantined
	for ch := range slices.Chunk(ids, idChunk) {
		qs, err := scanQuarantined(ctx, db, `SELECT id, code, body FROM quarantine WHERE id IN (`+params(len(ch))+`) ORDER BY id`, anys(ch)...)
		if err != nil {
			return nil, err
		}
		out = append(out, qs...)
	}
	return out, nil
}

func scanQuarantined(ctx context.Context, db *sql.DB, q string, args ...any) ([]quarantined, error) {
	rs, err := db.QueryContext(ctx, q, args...)
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

// quarantinedIDs returns those of the sorted ids still quarantined, sorted.
func quarantinedIDs(ctx context.Context, tx *sql.Tx, ids []int64) ([]int64, error) {
	var out []int64
	for ch := range slices.Chunk(ids, idChunk) {
		rs, err := tx.QueryContext(ctx, `SELECT id FROM quarantine WHERE id IN (`+params(len(ch))+`) ORDER BY id`, anys(ch)...)
		if err != nil {
			return nil, err
		}
		for rs.Next() {
			var id int64
			if err := rs.Scan(&id); err != nil {
				rs.Close()
				return nil, err
			}
			out = append(out, id)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// params is n comma-separated placeholders.
func params(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func anys(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

func idsOf(qs []quarantined) []int64 {
	out := make([]int64, len(qs))
	for i, q := range qs {
		out[i] = q.id
	}
	return out
}

// missing is the ErrNotQuarantined of the ids the sorted found lacks,
// naming a few.
func missing(ids, found []int64) error {
	var gone []string
	for _, id := range ids {
		if _, ok := slices.BinarySearch(found, id); !ok {
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
		if err = json.Unmarshal([]byte(q.body), &b.Events[0]); err == nil {
			b.Events[0].Data = unescapeHTML(b.Events[0].Data)
		}
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

// unescapeHTML undoes the \u escapes of encoding/json's HTML escaping (<,
// >, &, U+2028, U+2029) in JSON text: an edge before wire.Marshal kept
// the events it set aside itself so escaped, up to six times their size,
// and data near wire.MaxDataBytes would come back over it and be cut to a
// note of its size. Every backslash in JSON text starts an escape, so one
// pass that copies the other escapes as they are finds them all; the
// characters are the same JSON either way.
func unescapeHTML(data []byte) []byte {
	if !bytes.Contains(data, []byte(`\u`)) {
		return data
	}
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' || i+1 == len(data) {
			out = append(out, data[i])
			continue
		}
		if data[i+1] == 'u' && i+6 <= len(data) {
			if r, ok := htmlEscapes[strings.ToLower(string(data[i+2:i+6]))]; ok {
				out = utf8.AppendRune(out, r)
				i += 5
				continue
			}
		}
		out = append(out, data[i], data[i+1])
		i++
	}
	return out
}

var htmlEscapes = map[string]rune{"003c": '<', "003e": '>', "0026": '&', "2028": '\u2028', "2029": '\u2029'}

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
