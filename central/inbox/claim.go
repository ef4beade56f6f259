package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// load reads what an executor needs of each claimed row, in claim order.
func (s *Store) load(ctx context.Context, tx *sql.Tx, claims []lease.Claim) ([]*Job, error) {
	byID := make(map[string]*Job, len(claims))
	jobs := make([]*Job, len(claims))
	ph := make([]string, len(claims))
	args := make([]any, len(claims))
	ids := make([]string, len(claims))
	for i, c := range claims {
		j := &Job{Claim: c}
		jobs[i] = j
		byID[c.ID] = j
		ph[i] = "?"
		args[i] = c.ID
		ids[i] = c.ID
	}
	in := "IN (" + strings.Join(ph, ", ") + ")"
	if s.db.Engine == sqldb.Postgres {
		in, args = "= ANY(?::text[])", []any{ids}
	}
	rows, err := tx.QueryContext(ctx, s.db.Rebind(`SELECT id, requester_id, max_attempts, credential_version,
		refresh_attempt_count, source_url, source_bucket, source_key, source_endpoint, source_region,
		output_bucket, output_prefix, output_endpoint, output_region, renditions, status_webhook_url,
		refresh_url, metadata FROM inbox_jobs WHERE id `+in), args...)
	if err != nil {
		return nil, fmt.Errorf("load claimed jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                                              string
			su, sb, sk, se, sr, oe, or, hook, refresh, meta *string
			rend, requester, outBucket, outPrefix           string
			maxAttempts, credVersion, refreshes             int
		)
		if err := rows.Scan(&id, &requester, &maxAttempts, &credVersion, &refreshes,
			&su, &sb, &sk, &se, &sr, &outBucket, &outPrefix, &oe, &or, &rend, &hook, &refresh, &meta); err != nil {
			return nil, err
		}
		j := byID[id]
		if j == nil {
			continue
		}
		j.RequesterID, j.MaxAttempts, j.CredentialVersion, j.RefreshAttempts = requester, maxAttempts, credVersion, refreshes
		j.Source = Source{URL: deref(su), Bucket: deref(sb), Key: deref(sk), Endpoint: deref(se), Region: deref(sr)}
		j.Output = Output{Bucket: outBucket, Prefix: outPrefix, Endpoint: deref(oe), Region: deref(or)}
		j.StatusWebhookURL, j.RefreshURL = deref(hook), deref(refresh)
		if meta != nil {
			j.Metadata = json.RawMessage(*meta)
		}
		if err := json.Unmarshal([]byte(rend), &j.Renditions); err != nil {
			return nil, fmt.Errorf("job %s: renditions: %w", id, err)
		}
	}
	return jobs, rows.Err()
}

// onExpire moves jobs whose lease ran out back along the table: to queued
// while attempts remain, else failed -> dead_letter. Each already carries
// the new claim version the reclaim allocated.
func (s *Store) onExpire(ctx context.Context, tx *sql.Tx, expired []lease.Claim, now time.Time) error {
	jobs, err := s.load(ctx, tx, expired)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		c := j.claim()
		if _, err := s.fail(ctx, tx, j, &c, JobError{Class: leaseExpired, Code: "lease_expired",
			Message: fmt.Sprintf("lease of worker expired during %s (attempt %d)", j.Status, j.Attempt)}, now); err != nil {
			return err
		}
	}
	return nil
}
