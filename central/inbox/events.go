package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// EventType is the type of every job_outbox_events row written here.
const EventType = "job.status"

// Event is the webhook body of one job transition (contract §8):
// intermediate states carry status and metadata; succeeded adds outputs;
// failed and dead_letter add the normalized error.
type Event struct {
	EventID        string          `json:"event_id"`
	Type           string          `json:"type"`
	JobID          string          `json:"job_id"`
	Sequence       int64           `json:"sequence"`
	Status         string          `json:"status"`
	PreviousStatus string          `json:"previous_status"`
	OccurredAt     time.Time       `json:"occurred_at"`
	AttemptCount   int             `json:"attempt_count"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
	Outputs        json.RawMessage `json:"outputs,omitempty"`
	Error          *ErrorBody      `json:"error,omitempty"`
	// Progress (0-100) is set on progress events, whose status equals
	// previous_status.
	Progress *int `json:"progress,omitempty"`

	requesterID string
	webhookURL  string
	// metadataEnc and outputsEnc hold Metadata and Outputs already encoded
	// (appendJSON), when the event's builder had them.
	metadataEnc, outputsEnc encodedRaw
}

// transition builds the event for a move of job from -> to recorded at seq.
func transition(j *Job, from, to string, seq int64, now time.Time) Event {
	return Event{
		EventID:        newID(),
		Type:           EventType,
		JobID:          j.ID,
		Sequence:       seq,
		Status:         to,
		PreviousStatus: from,
		OccurredAt:     now.UTC(),
		AttemptCount:   j.Attempt,
		Metadata:       j.Metadata,
		requesterID:    j.RequesterID,
		webhookURL:     j.StatusWebhookURL,
		metadataEnc:    j.metadataEnc,
	}
}

// eventColumns are the job_outbox_events columns an event row fills, in
// the order of Event.row.
var eventColumns = []string{"event_id", "job_id", "requester_id", "sequence", "event_type", "status",
	"webhook_url", "payload", "next_attempt_at", "created_at"}

// insertEvents writes events in one batch. Events of jobs without a
// status_webhook_url are stored as skipped: history, not work.
func insertEvents(ctx context.Context, db *sqldb.DB, tx lease.Execer, evs []Event) error {
	if db.Engine == sqldb.Postgres {
		return insertCopy(ctx, db, tx, evs)
	}
	// SQLite: one prepared single-row INSERT per event (ExecTx). A
	// multi-row INSERT is a multi-write statement, and the CHECK on
	// last_error calls a function, so SQLite would give every such
	// statement a statement journal: each page it touches copied to memory
	// and freed again at its end, which cost more than the rows themselves.
	// A single-row INSERT needs none, and its ten parameters bind in
	// constant time (the driver binds in time quadratic in their number).
	for i := range evs {
		row, err := evs[i].row()
		if err != nil {
			return err
		}
		if _, err := db.ExecTx(ctx, tx, insertEventSQL, row...); err != nil {
			return fmt.Errorf("inbox: insert outbox events: %w", err)
		}
	}
	return nil
}

// insertEventSQL inserts one outbox event (SQLite).
var insertEventSQL = "INSERT INTO job_outbox_events (" + strings.Join(eventColumns, ", ") + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

// row is the event's column values in eventColumns order.
func (e *Event) row() ([]any, error) {
	payload, err := e.appendJSON(make([]byte, 0, 320))
	if err != nil {
		return nil, fmt.Errorf("inbox: event payload: %w", err)
	}
	status := schema.OutboxPending
	if e.webhookURL == "" {
		status = schema.OutboxSkipped
	}
	us := sqldb.Micros(e.OccurredAt)
	return []any{e.EventID, e.JobID, e.requesterID, e.Sequence, e.Type, status,
		nullStr(e.webhookURL), string(payload), us, us}, nil
}

// newID returns a UUIDv7: unique like v4, but time-ordered, so primary-key
// inserts append to the index instead of landing on random pages.
func newID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// NewJobID returns a new job id (UUIDv7, time-ordered).
func NewJobID() string { return newID() }

// insertCopy is the Postgres path: the batch streamed with COPY in the
// same transaction (sqldb.DB.CopyFrom), or, in a transaction COPY cannot
// reach, one INSERT of ten array parameters expanded by unnest.
func insertCopy(ctx context.Context, db *sqldb.DB, tx lease.Execer, evs []Event) error {
	rows := make([][]any, len(evs))
	for i := range evs {
		row, err := evs[i].row()
		if err != nil {
			return err
		}
		rows[i] = row
	}
	_, err := db.CopyFrom(ctx, tx, "job_outbox_events", eventColumns, rows)
	if errors.Is(err, sqldb.ErrNoCopy) {
		return insertUnnest(ctx, tx, rows)
	}
	if err != nil {
		return fmt.Errorf("inbox: insert outbox events: %w", err)
	}
	return nil
}

// insertUnnest writes rows (Event.row values) with one INSERT: each column
// as an array parameter, expanded server-side by unnest.
func insertUnnest(ctx context.Context, tx lease.Execer, rows [][]any) error {
	n := len(rows)
	ids, jobs, reqs, types, statuses, hooks, payloads := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]*string, n), make([]string, n)
	seqs, times := make([]int64, n), make([]int64, n)
	for i, r := range rows {
		ids[i], jobs[i], reqs[i], seqs[i], types[i], statuses[i], payloads[i], times[i] =
			r[0].(string), r[1].(string), r[2].(string), r[3].(int64), r[4].(string), r[5].(string), r[7].(string), r[8].(int64)
		if h, ok := r[6].(string); ok {
			hooks[i] = &h
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO job_outbox_events (`+strings.Join(eventColumns, ", ")+`)
		SELECT e, j, r, s, t, st, h, p, c, c
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[])
		AS u(e, j, r, s, t, st, h, p, c)`, ids, jobs, reqs, seqs, types, statuses, hooks, payloads, times)
	if err != nil {
		return fmt.Errorf("inbox: insert outbox events: %w", err)
	}
	return nil
}
