package outbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Delivery is one outbox event as the console shows it: where it goes,
// how many attempts it took and the last answer. The webhook URL is cut to
// scheme, host and path, with path segments of 16 or more characters
// replaced, since a receiver's query string, user info or path may carry a
// token of its own; the payload and the requester's secret are not
// read at all.
type Delivery struct {
	EventID        string
	JobID          string
	RequesterID    string
	Sequence       int64
	EventType      string
	Status         string
	Webhook        string
	AttemptCount   int
	LastStatusCode *int
	LastError      string
	NextAttemptAt  time.Time
	CreatedAt      time.Time
	DeliveredAt    *time.Time
	DeadLetteredAt *time.Time
	RedrivenAt     *time.Time
}

const deliveryCols = `event_id, job_id, requester_id, sequence, event_type, status, webhook_url, attempt_count,
	last_status_code, last_error, next_attempt_at, created_at, delivered_at, dead_lettered_at, redriven_at`

func (s *Store) deliveries(ctx context.Context, where string, args ...any) ([]Delivery, error) {
	rows, err := s.DB.QueryContext(ctx, s.DB.Rebind(`SELECT `+deliveryCols+` FROM job_outbox_events WHERE `+where), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: deliveries: %w", err)
	}
	defer rows.Close()
	out := []Delivery{}
	for rows.Next() {
		var d Delivery
		var hook, lastErr *string
		var next, created int64
		var delivered, dead, redriven *int64
		if err := rows.Scan(&d.EventID, &d.JobID, &d.RequesterID, &d.Sequence, &d.EventType, &d.Status, &hook, &d.AttemptCount,
			&d.LastStatusCode, &lastErr, &next, &created, &delivered, &dead, &redriven); err != nil {
			return nil, fmt.Errorf("outbox: deliveries: %w", err)
		}
		if hook != nil {
			d.Webhook = daemon.ShownURL(*hook)
		}
		if lastErr != nil {
			d.LastError = *lastErr
		}
		d.NextAttemptAt, d.CreatedAt = sqldb.FromMicros(next), sqldb.FromMicros(created)
		d.DeliveredAt, d.DeadLetteredAt, d.RedrivenAt = micros(delivered), micros(dead), micros(redriven)
		out = append(out, d)
	}
	return out, rows.Err()
}

// Deliveries lists a job's events in sequence order.
func (s *Store) Deliveries(ctx context.Context, jobID string) ([]Delivery, error) {
	return s.deliveries(ctx, `job_id = ? ORDER BY sequence`, jobID)
}

// DeadFilter selects a page of dead letters.
type DeadFilter struct {
	Cursor string // opaque, from DeadPage.NextCursor
	Limit  int    // 1-500, default 100
}

// DeadPage is one keyset page of dead letters, the latest first.
type DeadPage struct {
	Events     []Delivery
	NextCursor string
}

// ErrBadCursor is returned for a cursor DeadLetters did not make.
var ErrBadCursor = errors.New("outbox: invalid cursor")

// DeadLetters lists dead-lettered events, the latest first by
// (dead_lettered_at, event_id), a page at a time: the cursor is the
// previous page's last event's position in that order. The
// job_outbox_events_dead index (dead_lettered_at, dead letters only)
// serves it; only events dead-lettered in the same microsecond are sorted.
func (s *Store) DeadLetters(ctx context.Context, f DeadFilter) (DeadPage, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	where, args := `status = ?`, []any{schema.OutboxDeadLetter}
	if f.Cursor != "" {
		at, id, err := decodeDeadCursor(f.Cursor)
		if err != nil {
			return DeadPage{}, err
		}
		where += ` AND (dead_lettered_at, event_id) < (?, ?)`
		args = append(args, at, id)
	}
	evs, err := s.deliveries(ctx, where+` ORDER BY dead_lettered_at DESC, event_id DESC LIMIT ?`, append(args, f.Limit+1)...)
	if err != nil {
		return DeadPage{}, err
	}
	p := DeadPage{Events: evs}
	if len(evs) > f.Limit {
		p.Events = evs[:f.Limit]
		last := p.Events[f.Limit-1]
		if last.DeadLetteredAt != nil {
			p.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(sqldb.Micros(*last.DeadLetteredAt), 10) + ":" + last.EventID))
		}
	}
	return p, nil
}

// decodeDeadCursor reads a cursor DeadLetters made; anything else (bytes
// that are not UTF-8 among them, which Postgres would refuse) is
// ErrBadCursor.
func decodeDeadCursor(c string) (int64, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrBadCursor
	}
	at, id, ok := strings.Cut(string(raw), ":")
	if !ok || id == "" || len(id) > 64 || !sqldb.IsText(id) {
		return 0, "", ErrBadCursor
	}
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != at {
		return 0, "", ErrBadCursor
	}
	return n, id, nil
}

func micros(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := sqldb.FromMicros(*v)
	return &t
}
