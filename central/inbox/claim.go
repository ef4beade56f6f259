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

// jobColumns are what an executor needs of a claimed row; the claim
// returns them (Spec.Returning), and load reads them for reclaimed rows.
var jobColumns = []string{"requester_id", "max_attempts", "credential_version", "refresh_attempt_count",
	"source_url", "source_bucket", "source_key", "source_endpoint", "source_region",
	"output_bucket", "output_prefix", "output_endpoint", "output_region", "renditions",
	"status_webhook_url", "refresh_url", "metadata"}

// jobRow is the scan target of jobColumns.
type jobRow struct {
	requester, outBucket, outPrefix, rend           string
	maxAttempts, credVersion, refreshes             int
	su, sb, sk, se, sr, oe, or, hook, refresh, meta *string
}

func (r *jobRow) dest() []any {
	return []any{&r.requester, &r.maxAttempts, &r.credVersion, &r.refreshes, &r.su, &r.sb, &r.sk, &r.se, &r.sr,
		&r.outBucket, &r.outPrefix, &r.oe, &r.or, &r.rend, &r.hook, &r.refresh, &r.meta}
}

func (r *jobRow) apply(j *Job) error {
	j.RequesterID, j.MaxAttempts, j.CredentialVersion, j.RefreshAttempts = r.requester, r.maxAttempts, r.credVersion, r.refreshes
	j.Source = Source{URL: deref(r.su), Bucket: deref(r.sb), Key: deref(r.sk), Endpoint: deref(r.se), Region: deref(r.sr)}
	j.Output = Output{Bucket: r.outBucket, Prefix: r.outPrefix, Endpoint: deref(r.oe), Region: deref(r.or)}
	j.StatusWebhookURL, j.RefreshURL = deref(r.hook), deref(r.refresh)
	if r.meta != nil {
		j.Metadata = json.RawMessage(*r.meta)
		j.metadataEnc = encodeRaw(j.Metadata)
	}
	if err := json.Unmarshal([]byte(r.rend), &j.Renditions); err != nil {
		return fmt.Errorf("job %s: renditions: %w", j.ID, err)
	}
	return nil
}

// requesterScanner scans the first returned column (requester_id) and
// carries the row it belongs to, so fromClaim can find the row again.
type requesterScanner struct{ r *jobRow }

func (s requesterScanner) Scan(v any) error {
	switch x := v.(type) {
	case string:
		s.r.requester = x
	case []byte:
		s.r.requester = string(x)
	default:
		return fmt.Errorf("requester_id: unexpected %T", v)
	}
	return nil
}

// extraDest makes the scan destinations of a claim's Returning columns.
func extraDest() []any {
	r := &jobRow{}
	d := r.dest()
	d[0] = requesterScanner{r}
	return d
}

// fromClaim builds a Job from a fresh claim and the columns it returned.
func fromClaim(c lease.Claim) (*Job, error) {
	r := c.Extra[0].(requesterScanner).r
	c.Extra = nil
	j := &Job{Claim: c}
	return j, r.apply(j)
}

// load reads jobColumns of each reclaimed row, in claim order.
func (s *Store) load(ctx context.Context, tx *sql.Tx, claims []lease.Claim) ([]*Job, error) {
	byID := make(map[string]*Job, len(claims))
	jobs := make([]*Job, len(claims))
	ids := make([]string, len(claims))
	for i, c := range claims {
		j := &Job{Claim: c}
		jobs[i] = j
		byID[c.ID] = j
		ids[i] = c.ID
	}
	in, arg := "IN (SELECT value FROM json_each(?))", any(nil)
	if s.db.Engine == sqldb.Postgres {
		in, arg = "= ANY(?::text[])", ids
	} else {
		list, _ := json.Marshal(ids)
		arg = string(list)
	}
	rows, err := tx.QueryContext(ctx, s.db.Rebind(`SELECT id, `+strings.Join(jobColumns, ", ")+` FROM inbox_jobs WHERE id `+in), arg)
	if err != nil {
		return nil, fmt.Errorf("load claimed jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var r jobRow
		if err := rows.Scan(append([]any{&id}, r.dest()...)...); err != nil {
			return nil, err
		}
		if j := byID[id]; j != nil {
			if err := r.apply(j); err != nil {
				return nil, err
			}
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
	if p, ok := ctx.Value(expiredKey{}).(*bool); ok && len(jobs) > 0 {
		*p = true
	}
	return nil
}

// expiredKey carries, through a Claim's context, whether its reclaim of
// expired leases wrote events (onExpire): the claim may take no job at all
// (the expired ones wait out their backoff) and still have events for the
// dispatcher.
type expiredKey struct{}
