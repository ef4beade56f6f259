package ingest

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// pruneBatch is how many rows one delete removes, so no transaction (and,
// on SQLite, no turn of the single writer) runs long.
const pruneBatch = 2000

// Pruned counts what a Prune deleted, by table.
type Pruned struct{ Events, Gaps, Jobs int64 }

// jobKey names an edge job.
type jobKey struct{ edge, job string }

// Prune deletes what retention no longer keeps: events received before
// cutoff, gaps received before it, and job summaries whose last activity
// (the last batch that touched them) is before it. It deletes in batches
// until nothing is left or ctx ends. The edges' lifetime counters
// (events_total, dropped_total) stay.
//
// Deleting an event id forgets that it was received, so the deletes of
// events and gaps remember, per job, the latest entry they removed
// (edge_pruned_jobs): ingest answers a resend of those entries as
// duplicates rather than store them again (see pruneMarks). Those marks go
// one retention period after the prune that wrote them.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (Pruned, error) {
	var p Pruned
	at := sqldb.Micros(cutoff)
	now := sqldb.Micros(s.now())
	// The deletes of marks and job summaries test their age again outside
	// the subquery: on Postgres a row another transaction renews (a mark
	// raised by another pod's prune, a summary touched by a batch) after
	// the subquery read it is rechecked, once that transaction commits,
	// against the outer condition only, and would be deleted renewed.
	if _, err := s.pruneLoop(ctx, func(tx *sql.Tx) (int64, error) {
		return execCount(ctx, tx, s.db.Rebind(`DELETE FROM edge_pruned_jobs WHERE (edge_id, job_id) IN
			(SELECT edge_id, job_id FROM edge_pruned_jobs WHERE pruned_at < ? LIMIT ?) AND pruned_at < ?`), at, pruneBatch, at)
	}); err != nil {
		return p, err
	}
	var err error
	if p.Events, err = s.pruneLoop(ctx, func(tx *sql.Tx) (int64, error) {
		return s.pruneRemembering(ctx, tx, `SELECT seq, edge_id, job_id, entry_id FROM edge_events WHERE received_at < ? LIMIT ?`,
			`DELETE FROM edge_events WHERE seq IN `, at, now)
	}); err != nil {
		return p, err
	}
	if p.Gaps, err = s.pruneLoop(ctx, func(tx *sql.Tx) (int64, error) {
		return s.pruneRemembering(ctx, tx, `SELECT gap_id, edge_id, job_id, last_entry_id FROM edge_gaps WHERE received_at < ? LIMIT ?`,
			`DELETE FROM edge_gaps WHERE gap_id IN `, at, now)
	}); err != nil {
		return p, err
	}
	if p.Jobs, err = s.pruneLoop(ctx, func(tx *sql.Tx) (int64, error) {
		return execCount(ctx, tx, s.db.Rebind(`DELETE FROM edge_jobs WHERE (edge_id, job_id) IN
			(SELECT edge_id, job_id FROM edge_jobs WHERE updated_at < ? LIMIT ?) AND updated_at < ?`), at, pruneBatch, at)
	}); err != nil {
		return p, err
	}
	return p, ctx.Err()
}

// pruneLoop runs step, one transaction each, until it deletes fewer than
// pruneBatch rows or ctx ends, and returns the rows deleted.
func (s *Store) pruneLoop(ctx context.Context, step func(tx *sql.Tx) (int64, error)) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		var n int64
		err := s.db.Tx(ctx, func(tx *sql.Tx) error {
			var err error
			n, err = step(tx)
			return err
		})
		if err != nil {
			return total, fmt.Errorf("ingest: prune: %w", err)
		}
		total += n
		if n < pruneBatch {
			break
		}
	}
	return total, nil
}

func execCount(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// pruneRemembering deletes up to pruneBatch rows that sel finds (key,
// edge, job, entry id), after raising each job's mark to the latest entry
// among them, in the same transaction.
func (s *Store) pruneRemembering(ctx context.Context, tx *sql.Tx, sel, del string, at, now int64) (int64, error) {
	rows, err := tx.QueryContext(ctx, s.db.Rebind(sel), at, pruneBatch)
	if err != nil {
		return 0, err
	}
	var keys []any
	marks := map[jobKey]entry{}
	for rows.Next() {
		var key any
		var k jobKey
		var id string
		if err := rows.Scan(&key, &k.edge, &k.job, &id); err != nil {
			rows.Close()
			return 0, err
		}
		keys = append(keys, key)
		if e, ok := marks[k]; !ok || e.less(parseEntry(id)) {
			marks[k] = parseEntry(id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(keys) == 0 {
		return 0, err
	}
	if err := s.raiseMarks(ctx, tx, marks, now); err != nil {
		return 0, err
	}
	n, err := execCount(ctx, tx, s.db.Rebind(del+"("+strings.TrimSuffix(strings.Repeat("?,", len(keys)), ",")+")"), keys...)
	if err == nil {
		s.at("pruned")
	}
	return n, err
}

// raiseMarks upserts the marks, in key order (the lock order), keeping
// the later entry of the stored and the new mark.
func (s *Store) raiseMarks(ctx context.Context, tx *sql.Tx, marks map[jobKey]entry, now int64) error {
	keys := make([]jobKey, 0, len(marks))
	for k := range marks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b jobKey) int { return cmp.Or(cmp.Compare(a.edge, b.edge), cmp.Compare(a.job, b.job)) })
	later := `(excluded.entry_ms > edge_pruned_jobs.entry_ms OR (excluded.entry_ms = edge_pruned_jobs.entry_ms
		AND excluded.entry_seq > edge_pruned_jobs.entry_seq))`
	for start := 0; start < len(keys); start += sqliteChunk {
		chunk := keys[start:min(start+sqliteChunk, len(keys))]
		args := make([]any, 0, len(chunk)*5)
		for _, k := range chunk {
			e := marks[k]
			args = append(args, k.edge, k.job, e.ms, e.seq, now)
		}
		q := `INSERT INTO edge_pruned_jobs (edge_id, job_id, entry_ms, entry_seq, pruned_at) VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?,?,?,?,?),", len(chunk)), ",") + ` ON CONFLICT (edge_id, job_id) DO UPDATE SET
			entry_ms = CASE WHEN ` + later + ` THEN excluded.entry_ms ELSE edge_pruned_jobs.entry_ms END,
			entry_seq = CASE WHEN ` + later + ` THEN excluded.entry_seq ELSE edge_pruned_jobs.entry_seq END,
			pruned_at = excluded.pruned_at`
		if _, err := tx.ExecContext(ctx, s.db.Rebind(q), args...); err != nil {
			return fmt.Errorf("remember pruned entries: %w", err)
		}
	}
	return nil
}

// pruneMarks reads the marks of the jobs of a batch: entries up to a
// job's mark were stored once and removed by retention.
func (s *Store) pruneMarks(ctx context.Context, tx *sql.Tx, b wire.Batch) (map[string]entry, error) {
	seen := map[string]bool{}
	var jobs []any
	add := func(job string) {
		if !seen[job] {
			seen[job] = true
			jobs = append(jobs, job)
		}
	}
	for _, e := range b.Events {
		add(e.JobID)
	}
	for _, g := range b.Dropped {
		add(g.JobID)
	}
	marks := map[string]entry{}
	if len(jobs) == 0 {
		return marks, nil
	}
	rows, err := tx.QueryContext(ctx, s.db.Rebind(`SELECT job_id, entry_ms, entry_seq FROM edge_pruned_jobs WHERE edge_id = ? AND job_id IN (`+
		strings.TrimSuffix(strings.Repeat("?,", len(jobs)), ",")+`)`), append([]any{b.EdgeID}, jobs...)...)
	if err != nil {
		return nil, fmt.Errorf("ingest: read pruned entries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var job string
		var e entry
		if err := rows.Scan(&job, &e.ms, &e.seq); err != nil {
			return nil, fmt.Errorf("ingest: read pruned entries: %w", err)
		}
		marks[job] = e
	}
	return marks, rows.Err()
}

// takeBackPruned deletes again what this transaction inserted and a prune
// that committed meanwhile covers, and returns the marks read now and the
// gaps that stay new. Under read committed the marks read before the
// insert may predate a prune that then deleted those very entries: the
// insert no longer conflicts with them (one that met the prune's
// uncommitted delete waited for its commit, then inserted), so they would
// be stored a second time. The prune writes its marks in the transaction
// of its deletes, so a statement that starts after the insert sees them.
// fresh loses the events taken back.
func (s *Store) takeBackPruned(ctx context.Context, tx *sql.Tx, b wire.Batch, events []wire.Event, fresh map[string]bool,
	gaps []wire.Gap) (map[string]entry, []wire.Gap, error) {
	marks, err := s.pruneMarks(ctx, tx, b)
	if err != nil || len(marks) == 0 {
		return marks, gaps, err
	}
	var ids []any
	for _, e := range events {
		if fresh[e.EventID] && pruned(marks, e.JobID, e.EntryID) {
			ids = append(ids, e.EventID)
			delete(fresh, e.EventID)
		}
	}
	var gapIDs []any
	kept := make([]wire.Gap, 0, len(gaps))
	for _, g := range gaps {
		if pruned(marks, g.JobID, g.LastEntryID) {
			gapIDs = append(gapIDs, g.GapID)
		} else {
			kept = append(kept, g)
		}
	}
	for _, del := range []struct {
		q   string
		ids []any
	}{{`DELETE FROM edge_events WHERE event_id IN `, ids}, {`DELETE FROM edge_gaps WHERE gap_id IN `, gapIDs}} {
		if len(del.ids) == 0 {
			continue
		}
		q := del.q + "(" + strings.TrimSuffix(strings.Repeat("?,", len(del.ids)), ",") + ")"
		if _, err := tx.ExecContext(ctx, s.db.Rebind(q), del.ids...); err != nil {
			return nil, nil, fmt.Errorf("ingest: take back pruned entries: %w", err)
		}
	}
	return marks, kept, nil
}

// countPruned counts the distinct events and gaps of a batch at or before
// their job's mark.
func countPruned(marks map[string]entry, events []wire.Event, gaps []wire.Gap) (nEvents, nGaps int) {
	if len(marks) == 0 {
		return 0, 0
	}
	for _, e := range events {
		if pruned(marks, e.JobID, e.EntryID) {
			nEvents++
		}
	}
	seen := map[string]bool{}
	for _, g := range gaps {
		if !seen[g.GapID] && pruned(marks, g.JobID, g.LastEntryID) {
			nGaps++
		}
		seen[g.GapID] = true
	}
	return nEvents, nGaps
}

// pruned reports whether entry id of job is at or before the job's mark.
func pruned(marks map[string]entry, job, id string) bool {
	m, ok := marks[job]
	return ok && !m.less(parseEntry(id))
}
