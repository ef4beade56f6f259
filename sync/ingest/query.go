package ingest

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// EdgeView is an edge as the operator API shows it.
type EdgeView struct {
	EdgeID        string     `json:"edge_id"`
	Name          string     `json:"name"`
	CreatedAt     time.Time  `json:"created_at"`
	DisabledAt    *time.Time `json:"disabled_at,omitempty"`
	LastSeenAt    *time.Time `json:"last_seen_at,omitempty"`
	Stale         bool       `json:"stale"`
	Version       string     `json:"version,omitempty"`
	SecretVersion int        `json:"sync_secret_version"`
	EventsTotal   int64      `json:"events_total"`
	DroppedTotal  int64      `json:"dropped_total"`
	// From the last heartbeat: the queue backlog, the spool and the
	// spool's oldest event age (edge clock, at the time it reported).
	Backlog         *int64          `json:"backlog,omitempty"`
	SpoolEvents     *int64          `json:"spool_events,omitempty"`
	SpoolOldestAgeS *int64          `json:"spool_oldest_age_s,omitempty"`
	Status          json.RawMessage `json:"status,omitempty"`
}

const edgeColumns = `id, name, created_at, disabled_at, last_seen_at, version, secret_version, events_total, dropped_total, last_status`

func scanEdge(row interface{ Scan(...any) error }, now time.Time, staleAfter time.Duration) (EdgeView, error) {
	var v EdgeView
	var created int64
	var disabled, seen *int64
	var version, status *string
	if err := row.Scan(&v.EdgeID, &v.Name, &created, &disabled, &seen, &version, &v.SecretVersion, &v.EventsTotal, &v.DroppedTotal, &status); err != nil {
		return v, err
	}
	v.CreatedAt = sqldb.FromMicros(created)
	if disabled != nil {
		t := sqldb.FromMicros(*disabled)
		v.DisabledAt = &t
	}
	v.Stale = true
	if seen != nil {
		t := sqldb.FromMicros(*seen)
		v.LastSeenAt = &t
		v.Stale = now.Sub(t) > staleAfter
	}
	if version != nil {
		v.Version = *version
	}
	if status != nil && json.Valid([]byte(*status)) {
		v.Status = json.RawMessage(*status)
		var st wire.Status
		if json.Unmarshal(v.Status, &st) == nil {
			v.Backlog, v.SpoolEvents = &st.Backlog, &st.Spool.Events
			if st.Spool.OldestTS > 0 {
				age := max(0, (st.SentAt.UnixMilli()-st.Spool.OldestTS)/1000)
				v.SpoolOldestAgeS = &age
			}
		}
	}
	return v, nil
}

// Edges lists every registered edge by name. A fleet is hundreds of
// edges, not millions, so the list is not paged.
func (s *Store) Edges(ctx context.Context, staleAfter time.Duration) ([]EdgeView, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+edgeColumns+` FROM edges ORDER BY name, id LIMIT 10000`)
	if err != nil {
		return nil, fmt.Errorf("ingest: list edges: %w", err)
	}
	defer rows.Close()
	out := []EdgeView{}
	now := s.now()
	for rows.Next() {
		v, err := scanEdge(rows, now, staleAfter)
		if err != nil {
			return nil, fmt.Errorf("ingest: list edges: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Edge returns one edge, or ErrNotFound.
func (s *Store) Edge(ctx context.Context, id string, staleAfter time.Duration) (EdgeView, error) {
	if !sqldb.IsText(id) { // from a URL; Postgres would fail on it
		return EdgeView{}, ErrNotFound
	}
	v, err := scanEdge(s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT `+edgeColumns+` FROM edges WHERE id = ?`), id), s.now(), staleAfter)
	if errors.Is(err, sql.ErrNoRows) {
		return v, ErrNotFound
	}
	if err != nil {
		return v, fmt.Errorf("ingest: edge: %w", err)
	}
	return v, nil
}

// JobView is one edge_jobs row.
type JobView struct {
	EdgeID       string    `json:"edge_id"`
	JobID        string    `json:"job_id"`
	Task         *string   `json:"task"`
	Status       string    `json:"status"`
	FirstTS      int64     `json:"first_ts"`
	LastTS       int64     `json:"last_ts"`
	StartedTS    *int64    `json:"started_ts"`
	FinishedTS   *int64    `json:"finished_ts"`
	TerminalType *string   `json:"terminal_type"`
	ErrorCode    *string   `json:"error_code"`
	Events       int64     `json:"events"`
	Dropped      int64     `json:"dropped"`
	UpdatedAt    time.Time `json:"updated_at"`
}

const jobColumns = `edge_id, job_id, task, status, first_ts, last_ts, started_ts, finished_ts, terminal_type, error_code, events, dropped, updated_at`

func scanJob(row interface{ Scan(...any) error }) (JobView, error) {
	var j JobView
	var upd int64
	err := row.Scan(&j.EdgeID, &j.JobID, &j.Task, &j.Status, &j.FirstTS, &j.LastTS, &j.StartedTS, &j.FinishedTS,
		&j.TerminalType, &j.ErrorCode, &j.Events, &j.Dropped, &upd)
	j.UpdatedAt = sqldb.FromMicros(upd)
	return j, err
}

// ErrBadCursor is returned for a cursor this API did not issue.
var ErrBadCursor = errors.New("ingest: invalid cursor")

// jobCursor is the keyset position after a page: the last row's
// (first_ts, job_id), in the order of edge_jobs_started. first_ts only
// falls (ingest keeps the smallest edge time seen), so a job that changes
// while the pages are read moves, if at all, towards the pages not read
// yet: it may come twice, never not at all. last_ts, which rises with
// every event, would carry an active job past the cursor.
type jobCursor struct {
	FirstTS *int64 `json:"f"`
	JobID   string `json:"j"`
}

func (c jobCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (*jobCursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) > 512 {
		return nil, ErrBadCursor
	}
	var c jobCursor
	// A job id holding NUL was never issued (no edge can send one), and
	// Postgres text cannot hold it: refused here, not failed there. A
	// cursor without "f" is from the last_ts order, a position in
	// another list.
	if json.Unmarshal(b, &c) != nil || c.FirstTS == nil || c.JobID == "" || !sqldb.IsText(c.JobID) {
		return nil, ErrBadCursor
	}
	return &c, nil
}

// Jobs returns a page of the edge's jobs, newest first (by first_ts, the
// edge's time of the job's first event), optionally of one status, after
// cursor (""), and the next cursor ("" at the end).
func (s *Store) Jobs(ctx context.Context, edgeID, status, cursor string, limit int) ([]JobView, string, error) {
	cur, err := decodeCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	q := `SELECT ` + jobColumns + ` FROM edge_jobs WHERE edge_id = ?`
	args := []any{edgeID}
	if status != "" {
		q += ` AND status = ?`
		args = append(args, status)
	}
	if cur != nil {
		q += ` AND (first_ts < ? OR (first_ts = ? AND job_id < ?))`
		args = append(args, *cur.FirstTS, *cur.FirstTS, cur.JobID)
	}
	q += ` ORDER BY first_ts DESC, job_id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.db.QueryContext(ctx, s.db.Rebind(q), args...)
	if err != nil {
		return nil, "", fmt.Errorf("ingest: jobs: %w", err)
	}
	defer rows.Close()
	out := []JobView{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, "", fmt.Errorf("ingest: jobs: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("ingest: jobs: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[len(out)-1]
		next = jobCursor{FirstTS: &last.FirstTS, JobID: last.JobID}.encode()
	}
	return out, next, nil
}

// Job returns one job summary, or ErrNotFound.
func (s *Store) Job(ctx context.Context, edgeID, jobID string) (JobView, error) {
	if !sqldb.IsText(edgeID) || !sqldb.IsText(jobID) { // from a URL; Postgres would fail on them
		return JobView{}, ErrNotFound
	}
	j, err := scanJob(s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT `+jobColumns+` FROM edge_jobs WHERE edge_id = ? AND job_id = ?`), edgeID, jobID))
	if errors.Is(err, sql.ErrNoRows) {
		return j, ErrNotFound
	}
	if err != nil {
		return j, fmt.Errorf("ingest: job: %w", err)
	}
	return j, nil
}

// EventView is one stored edge event.
type EventView struct {
	Seq        int64           `json:"seq"`
	EventID    string          `json:"event_id"`
	EdgeID     string          `json:"edge_id"`
	JobID      string          `json:"job_id"`
	EntryID    string          `json:"entry_id"`
	Type       string          `json:"type"`
	Step       string          `json:"step"`
	Task       *string         `json:"task,omitempty"`
	TS         int64           `json:"ts"`
	Data       json.RawMessage `json:"data"`
	ReceivedAt time.Time       `json:"received_at"`
}

const eventColumns = `seq, event_id, edge_id, job_id, entry_id, type, step, task, ts, data, received_at`

func scanEvent(row interface{ Scan(...any) error }, extra ...any) (EventView, error) {
	var e EventView
	var data string
	var recv int64
	dest := append([]any{&e.Seq, &e.EventID, &e.EdgeID, &e.JobID, &e.EntryID, &e.Type, &e.Step, &e.Task, &e.TS, &data, &recv}, extra...)
	err := row.Scan(dest...)
	e.Data, e.ReceivedAt = json.RawMessage(data), sqldb.FromMicros(recv)
	return e, err
}

// GapView is one recorded gap.
type GapView struct {
	GapID        string    `json:"gap_id"`
	Type         string    `json:"type"`
	Count        int64     `json:"count"`
	FirstEntryID string    `json:"first_entry_id"`
	LastEntryID  string    `json:"last_entry_id"`
	FirstTS      int64     `json:"first_ts"`
	LastTS       int64     `json:"last_ts"`
	ReceivedAt   time.Time `json:"received_at"`
}

// JobEvents returns up to limit events of a job in entry order after the
// entry id after ("" for the start), and all of the job's gaps.
func (s *Store) JobEvents(ctx context.Context, edgeID, jobID, after string, limit int) ([]EventView, []GapView, error) {
	a := entry{-1, -1}
	if after != "" {
		a = parseEntry(after)
	}
	rows, err := s.db.QueryContext(ctx, s.db.Rebind(`SELECT `+eventColumns+` FROM edge_events
		WHERE edge_id = ? AND job_id = ? AND (entry_ms > ? OR (entry_ms = ? AND entry_seq > ?))
		ORDER BY entry_ms, entry_seq LIMIT ?`), edgeID, jobID, a.ms, a.ms, a.seq, limit)
	if err != nil {
		return nil, nil, fmt.Errorf("ingest: job events: %w", err)
	}
	events := []EventView{}
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("ingest: job events: %w", err)
		}
		events = append(events, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("ingest: job events: %w", err)
	}
	rows, err = s.db.QueryContext(ctx, s.db.Rebind(`SELECT gap_id, type, count, first_entry_id, last_entry_id, first_ts, last_ts, received_at
		FROM edge_gaps WHERE edge_id = ? AND job_id = ? ORDER BY first_ts, gap_id`), edgeID, jobID)
	if err != nil {
		return nil, nil, fmt.Errorf("ingest: job gaps: %w", err)
	}
	defer rows.Close()
	gaps := []GapView{}
	for rows.Next() {
		var g GapView
		var recv int64
		if err := rows.Scan(&g.GapID, &g.Type, &g.Count, &g.FirstEntryID, &g.LastEntryID, &g.FirstTS, &g.LastTS, &recv); err != nil {
			return nil, nil, fmt.Errorf("ingest: job gaps: %w", err)
		}
		g.ReceivedAt = sqldb.FromMicros(recv)
		gaps = append(gaps, g)
	}
	return events, gaps, rows.Err()
}
