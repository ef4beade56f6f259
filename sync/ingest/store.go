package ingest

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Store writes what edges ship and reads it back for the operator API.
type Store struct {
	db  *sqldb.DB
	now func() time.Time
	// hook, when set (tests only), is called inside Ingest's transaction
	// at the named point ("marks": the retention marks are read; "stored":
	// everything is written, before the commit) and inside a prune's
	// ("pruned": rows deleted, before the commit), so a test can run the
	// other exactly there.
	hook func(point string)
}

// NewStore returns the store on db.
func NewStore(db *sqldb.DB) *Store { return &Store{db: db, now: time.Now} }

// Edge job statuses (edge_jobs.status), as the edge's own job hash has them.
const (
	StatusQueued   = "queued"
	StatusRunning  = "running"
	StatusDone     = "done"
	StatusError    = "error"
	StatusCanceled = "canceled"
)

// statusOf maps an event type to the job status it sets; other types
// (delta, progress, …) leave the status alone.
var statusOf = map[string]string{
	"queued": StatusQueued, "running": StatusRunning,
	"done": StatusDone, "error": StatusError, "canceled": StatusCanceled,
}

func terminal(status string) bool {
	return status == StatusDone || status == StatusError || status == StatusCanceled
}

// entry is a stream id split for ordering.
type entry struct{ ms, seq int64 }

func parseEntry(id string) entry {
	ms, seq, _ := strings.Cut(id, "-")
	a, _ := strconv.ParseInt(ms, 10, 64)
	b, _ := strconv.ParseInt(seq, 10, 64)
	return entry{a, b}
}

func (e entry) less(o entry) bool { return e.ms < o.ms || (e.ms == o.ms && e.seq < o.seq) }

// jobDelta is what one batch adds to one edge_jobs row.
type jobDelta struct {
	jobID                string
	task                 *string
	status               string
	statusAt             entry // {-1,-1}: no status event in the batch
	firstTS, lastTS      int64
	startedTS            *int64
	finishedTS           *int64
	terminalType, errCod *string
	events, dropped      int64
}

// Ingest stores a decoded batch in one transaction: the events (a known
// event_id is a no-op), the job summaries of jobs that got new events, the
// gaps (counted only when new) and the edge's counters. Resending a batch
// changes nothing and reports every event as a duplicate.
func (s *Store) Ingest(ctx context.Context, b wire.Batch) (wire.BatchResult, error) {
	events := append([]wire.Event(nil), b.Events...)
	// One global order (job, entry) keeps row locks in the same order in
	// every transaction, so overlapping batches never deadlock; it is also
	// the order seq is assigned in.
	slices.SortStableFunc(events, func(x, y wire.Event) int {
		if c := cmp.Compare(x.JobID, y.JobID); c != 0 {
			return c
		}
		ex, ey := parseEntry(x.EntryID), parseEntry(y.EntryID)
		if c := cmp.Compare(ex.ms, ey.ms); c != 0 {
			return c
		}
		return cmp.Compare(ex.seq, ey.seq)
	})
	events = slices.CompactFunc(events, func(x, y wire.Event) bool { return x.EventID == y.EventID })
	now := s.now()
	var res wire.BatchResult
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		res = wire.BatchResult{}
		// What retention removed is not stored again: those entries
		// count as duplicates, as they were before the prune.
		marks, err := s.pruneMarks(ctx, tx, b)
		if err != nil {
			return err
		}
		s.at("marks")
		live, gaps := events, b.Dropped
		if len(marks) > 0 {
			live = slices.DeleteFunc(slices.Clone(events), func(e wire.Event) bool { return pruned(marks, e.JobID, e.EntryID) })
			gaps = slices.DeleteFunc(slices.Clone(gaps), func(g wire.Gap) bool { return pruned(marks, g.JobID, g.LastEntryID) })
		}
		fresh, err := s.insertEvents(ctx, tx, live, now)
		if err != nil {
			return err
		}
		newGaps, err := s.insertGaps(ctx, tx, b.EdgeID, gaps, now)
		if err != nil {
			return err
		}
		// A prune may have committed since the marks were read (on
		// SQLite it cannot: the writer is this transaction's).
		if s.db.Engine == sqldb.Postgres && (len(fresh) > 0 || len(newGaps) > 0) {
			if marks, newGaps, err = s.takeBackPruned(ctx, tx, b, live, fresh, newGaps); err != nil {
				return err
			}
		}
		deltas := summarize(events, fresh, newGaps)
		if err := s.upsertJobs(ctx, tx, b.EdgeID, deltas, now); err != nil {
			return err
		}
		var dropped int64
		for _, g := range newGaps {
			dropped += g.Count
		}
		if _, err := s.db.ExecTx(ctx, tx, s.db.Rebind(`UPDATE edges SET last_seen_at = ?, events_total = events_total + ?,
			dropped_total = dropped_total + ? WHERE id = ?`), sqldb.Micros(now), len(fresh), dropped, b.EdgeID); err != nil {
			return fmt.Errorf("ingest: edge counters: %w", err)
		}
		res = wire.BatchResult{Accepted: len(fresh), Duplicates: len(events) - len(fresh), Gaps: len(newGaps)}
		res.Duplicates += len(b.Events) - len(events) // repeated inside the batch
		// Entries at or before a mark are answered as duplicates (the
		// edge deletes its copy) but told apart: central may never have
		// stored them (a quarantined batch resent by hand).
		res.Pruned, res.PrunedGaps = countPruned(marks, events, b.Dropped)
		s.at("stored")
		return nil
	})
	if err != nil {
		return wire.BatchResult{}, err
	}
	return res, nil
}

func (s *Store) at(point string) {
	if s.hook != nil {
		s.hook(point)
	}
}

// insertEvents inserts events (already sorted) in one statement and returns
// the event ids that were new.
func (s *Store) insertEvents(ctx context.Context, tx *sql.Tx, events []wire.Event, now time.Time) (map[string]bool, error) {
	fresh := make(map[string]bool, len(events))
	if len(events) == 0 {
		return fresh, nil
	}
	recv := sqldb.Micros(now)
	var rows *sql.Rows
	var err error
	if s.db.Engine == sqldb.Postgres {
		n := len(events)
		ids, edges, jobs, entries, types, steps, tasks, data := make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		ms, seqs, ts := make([]int64, n), make([]int64, n), make([]int64, n)
		for i, e := range events {
			en := parseEntry(e.EntryID)
			ids[i], edges[i], jobs[i], entries[i], types[i], steps[i], tasks[i], data[i] =
				e.EventID, e.EdgeID, e.JobID, e.EntryID, e.Type, e.Step, e.Task, string(e.Data)
			ms[i], seqs[i], ts[i] = en.ms, en.seq, e.TS
		}
		// xmin_at_insert: the tail's horizon, evaluated once per statement
		// (an uncorrelated subquery), not per row as a column default is.
		rows, err = tx.QueryContext(ctx, `INSERT INTO edge_events
			(event_id, edge_id, job_id, entry_id, entry_ms, entry_seq, type, step, task, ts, data, received_at, xmin_at_insert)
			SELECT u.id, u.edge, u.job, u.entry, u.ms, u.seq, u.typ, u.step, NULLIF(u.task, ''), u.ts, u.data, $12,
				(SELECT pg_snapshot_xmin(pg_current_snapshot()))
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], $8::text[],
				$9::text[], $10::bigint[], $11::text[]) WITH ORDINALITY AS u(id, edge, job, entry, ms, seq, typ, step, task, ts, data, ord)
			ORDER BY u.ord
			ON CONFLICT (event_id) DO NOTHING RETURNING event_id`,
			ids, edges, jobs, entries, ms, seqs, types, steps, tasks, ts, data, recv)
		if err != nil {
			return nil, fmt.Errorf("ingest: insert events: %w", err)
		}
		return fresh, collectIDs(rows, fresh)
	}
	// SQLite: multi-VALUES statements of sqliteChunk rows. The driver binds
	// parameters in time quadratic in their number, so one statement of
	// 500 rows (6,000 parameters) costs far more than ten of 50; the
	// statement of a full chunk is prepared once and reused.
	for start := 0; start < len(events); start += sqliteChunk {
		chunk := events[start:min(start+sqliteChunk, len(events))]
		args := make([]any, 0, len(chunk)*12)
		for _, e := range chunk {
			en := parseEntry(e.EntryID)
			args = append(args, e.EventID, e.EdgeID, e.JobID, e.EntryID, en.ms, en.seq, e.Type, e.Step, e.Task, e.TS, string(e.Data), recv)
		}
		rows, err = s.db.QueryTx(ctx, tx, sqliteInsert(len(chunk)), args...)
		if err != nil {
			return nil, fmt.Errorf("ingest: insert events: %w", err)
		}
		if err := collectIDs(rows, fresh); err != nil {
			return nil, err
		}
	}
	return fresh, nil
}

const sqliteChunk = 25

var sqliteInserts sync.Map // rows -> statement

func sqliteInsert(n int) string {
	if q, ok := sqliteInserts.Load(n); ok {
		return q.(string)
	}
	var q strings.Builder
	q.WriteString(`INSERT INTO edge_events
		(event_id, edge_id, job_id, entry_id, entry_ms, entry_seq, type, step, task, ts, data, received_at) VALUES `)
	for i := range n {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?,?,?,?,?,?,?,?,NULLIF(?,''),?,?,?)")
	}
	q.WriteString(` ON CONFLICT (event_id) DO NOTHING RETURNING event_id`)
	sqliteInserts.Store(n, q.String())
	return q.String()
}

func collectIDs(rows *sql.Rows, into map[string]bool) error {
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("ingest: insert events: %w", err)
		}
		into[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ingest: insert events: %w", err)
	}
	return nil
}

// insertGaps inserts the batch's gaps and returns the ones that were new.
func (s *Store) insertGaps(ctx context.Context, tx *sql.Tx, edgeID string, gaps []wire.Gap, now time.Time) ([]wire.Gap, error) {
	var out []wire.Gap
	for _, g := range gaps {
		res, err := s.db.ExecTx(ctx, tx, s.db.Rebind(`INSERT INTO edge_gaps (gap_id, edge_id, job_id, type, count,
			first_entry_id, last_entry_id, first_ts, last_ts, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (gap_id) DO NOTHING`),
			g.GapID, edgeID, g.JobID, g.Type, g.Count, g.FirstEntryID, g.LastEntryID, g.FirstTS, g.LastTS, sqldb.Micros(now))
		if err != nil {
			return nil, fmt.Errorf("ingest: insert gap: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			out = append(out, g)
		}
	}
	return out, nil
}

// maxErrorCode bounds edge_jobs.error_code, in bytes.
const maxErrorCode = 128

// errorCode reads the code the edge worker writes into an error event's
// data ({"code": "...", "message": "..."}). The code is edge data going
// into a text column: Postgres refuses NUL (a JSON "\u0000" decodes to
// one) and invalid UTF-8 (a cut inside a character), and a batch whose
// insert fails is answered 503 and resent forever, holding back every
// event behind it. So NUL is removed and the cut falls on a character.
func errorCode(data json.RawMessage) *string {
	var v struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	c := strings.ReplaceAll(v.Code, "\x00", "")
	if len(c) > maxErrorCode {
		c = strings.ToValidUTF8(c[:maxErrorCode], "")
	}
	if c == "" {
		return nil
	}
	return &c
}

// summarize folds the new events and new gaps of a batch into one delta per
// job, sorted by job id (the lock order).
func summarize(events []wire.Event, fresh map[string]bool, gaps []wire.Gap) []*jobDelta {
	byJob := map[string]*jobDelta{}
	get := func(job string, ts int64) *jobDelta {
		d := byJob[job]
		if d == nil {
			d = &jobDelta{jobID: job, statusAt: entry{-1, -1}, firstTS: ts, lastTS: ts}
			byJob[job] = d
		}
		d.firstTS, d.lastTS = min(d.firstTS, ts), max(d.lastTS, ts)
		return d
	}
	for _, e := range events {
		if !fresh[e.EventID] {
			continue
		}
		d := get(e.JobID, e.TS)
		d.events++
		if e.Task != "" && d.task == nil {
			t := e.Task
			d.task = &t
		}
		st, ok := statusOf[e.Type]
		if !ok {
			continue
		}
		if st == StatusRunning && (d.startedTS == nil || e.TS < *d.startedTS) {
			ts := e.TS
			d.startedTS = &ts
		}
		if en := parseEntry(e.EntryID); d.statusAt.less(en) {
			d.status, d.statusAt = st, en
			d.finishedTS, d.terminalType, d.errCod = nil, nil, nil
			if terminal(st) {
				ts, typ := e.TS, e.Type
				d.finishedTS, d.terminalType = &ts, &typ
				if st == StatusError {
					d.errCod = errorCode(e.Data)
				}
			}
		}
	}
	for _, g := range gaps {
		d := get(g.JobID, g.FirstTS)
		d.lastTS = max(d.lastTS, g.LastTS)
		d.dropped += g.Count
	}
	out := make([]*jobDelta, 0, len(byJob))
	for _, d := range byJob {
		if d.status == "" {
			// Only deltas or gaps so far: the job has started on the edge.
			d.status = StatusRunning
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *jobDelta) int { return cmp.Compare(a.jobID, b.jobID) })
	return out
}

// upsertJobs applies the deltas in one multi-row upsert. A status (and its
// terminal fields) replaces the stored one only when its event is later in
// entry order than the event that set the stored one.
func (s *Store) upsertJobs(ctx context.Context, tx *sql.Tx, edgeID string, deltas []*jobDelta, now time.Time) error {
	chunk := len(deltas)
	if s.db.Engine == sqldb.SQLite {
		chunk = sqliteChunk // see insertEvents
	}
	for start := 0; start < len(deltas); start += chunk {
		if err := s.upsertJobChunk(ctx, tx, edgeID, deltas[start:min(start+chunk, len(deltas))], now); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) upsertJobChunk(ctx context.Context, tx *sql.Tx, edgeID string, deltas []*jobDelta, now time.Time) error {
	var q strings.Builder
	q.WriteString(`INSERT INTO edge_jobs (edge_id, job_id, task, status, status_entry_ms, status_entry_seq, first_ts, last_ts,
		started_ts, finished_ts, terminal_type, error_code, events, dropped, updated_at) VALUES `)
	args := make([]any, 0, len(deltas)*15)
	for i, d := range deltas {
		if i > 0 {
			q.WriteByte(',')
		}
		q.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")
		args = append(args, edgeID, d.jobID, d.task, d.status, d.statusAt.ms, d.statusAt.seq, d.firstTS, d.lastTS,
			d.startedTS, d.finishedTS, d.terminalType, d.errCod, d.events, d.dropped, sqldb.Micros(now))
	}
	newer := `(excluded.status_entry_ms > edge_jobs.status_entry_ms OR (excluded.status_entry_ms = edge_jobs.status_entry_ms
		AND excluded.status_entry_seq > edge_jobs.status_entry_seq))`
	pick := func(col string) string {
		return fmt.Sprintf("%s = CASE WHEN %s THEN excluded.%s ELSE edge_jobs.%s END", col, newer, col, col)
	}
	q.WriteString(` ON CONFLICT (edge_id, job_id) DO UPDATE SET
		task = COALESCE(edge_jobs.task, excluded.task),
		` + pick("status") + `, ` + pick("finished_ts") + `, ` + pick("terminal_type") + `, ` + pick("error_code") + `,
		` + pick("status_entry_seq") + `, ` + pick("status_entry_ms") + `,
		first_ts = CASE WHEN excluded.first_ts < edge_jobs.first_ts THEN excluded.first_ts ELSE edge_jobs.first_ts END,
		last_ts = CASE WHEN excluded.last_ts > edge_jobs.last_ts THEN excluded.last_ts ELSE edge_jobs.last_ts END,
		started_ts = CASE WHEN edge_jobs.started_ts IS NULL OR excluded.started_ts < edge_jobs.started_ts
			THEN COALESCE(excluded.started_ts, edge_jobs.started_ts) ELSE edge_jobs.started_ts END,
		events = edge_jobs.events + excluded.events,
		dropped = edge_jobs.dropped + excluded.dropped,
		updated_at = excluded.updated_at`)
	if _, err := s.db.ExecTx(ctx, tx, s.db.Rebind(q.String()), args...); err != nil {
		return fmt.Errorf("ingest: job summaries: %w", err)
	}
	return nil
}

// Heartbeat stores an edge's status report unless a newer one is stored.
func (s *Store) Heartbeat(ctx context.Context, st wire.Status, raw []byte) error {
	now := sqldb.Micros(s.now())
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := s.db.ExecTx(ctx, tx, s.db.Rebind(`UPDATE edges SET last_seen_at = ?,
			last_status = CASE WHEN last_status_at IS NULL OR last_status_at <= ? THEN ? ELSE last_status END,
			version = CASE WHEN last_status_at IS NULL OR last_status_at <= ? THEN ? ELSE version END,
			last_status_at = CASE WHEN last_status_at IS NULL OR last_status_at <= ? THEN ? ELSE last_status_at END
			WHERE id = ?`),
			now, st.SentAt.UnixMilli(), string(raw), st.SentAt.UnixMilli(), st.Version, st.SentAt.UnixMilli(), st.SentAt.UnixMilli(), st.EdgeID)
		if err != nil {
			return fmt.Errorf("ingest: heartbeat: %w", err)
		}
		return nil
	})
}
