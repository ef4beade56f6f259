package outbox

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Delivery is one outbox event as the console shows it: where it goes,
// how many attempts it took and the last answer. The webhook URL is cut to
// scheme, host and path, since a receiver's query string or user info may
// carry a token of its own; the payload and the requester's secret are not
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
			d.Webhook = webhookShown(*hook)
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

// DeadLetters lists dead-lettered events, the latest first, at most limit
// (1-500, default 100).
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]Delivery, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	return s.deliveries(ctx, `status = ? ORDER BY dead_lettered_at DESC, event_id LIMIT ?`, schema.OutboxDeadLetter, limit)
}

// webhookShown keeps scheme, host and path of a webhook URL.
func webhookShown(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

func micros(v *int64) *time.Time {
	if v == nil {
		return nil
	}
	t := sqldb.FromMicros(*v)
	return &t
}
