package pipeline

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// RefusedDay is a scheduled day whose message was refused for good
// (INVALID_MESSAGE, MESSAGE_TOO_LARGE): the scheduler recorded it once and
// will not try it again, so it waits for the operator to fix the cause and
// submit it (euterpe-central pipeline backfill). ActiveJobID is the key's
// active job (queued, running or succeeded) when one was submitted since;
// while it is empty the day still waits.
type RefusedDay struct {
	JobType      string    `json:"job_type"`
	Symbol       string    `json:"symbol"`
	Asof         string    `json:"asof"`
	ErrorCode    string    `json:"error_code"`
	ErrorMessage string    `json:"error_message"`
	RefusedAt    time.Time `json:"refused_at"`
	ActiveJobID  string    `json:"active_job_id,omitempty"`
}

// RefusedPage is one keyset page of refused days, the latest day first.
type RefusedPage struct {
	Days       []RefusedDay `json:"days"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// RefusedFilter selects refused days; empty fields match everything.
type RefusedFilter struct {
	JobType, Symbol string
	Cursor          string // opaque, from RefusedPage.NextCursor
	Limit           int    // 1-500, default 100
}

// refusedCursor is the last (asof, job_type, symbol) of a page.
type refusedCursor [3]string

// Refused lists the scheduled days the scheduler refused, the latest day
// first (then job type and symbol, descending), a page at a time.
func (s *Store) Refused(ctx context.Context, f RefusedFilter) (RefusedPage, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	where := []string{"r.job_id = ''"}
	var args []any
	if f.Cursor != "" {
		c, ok := decodeRefusedCursor(f.Cursor)
		if !ok {
			return RefusedPage{}, ErrBadCursor
		}
		where = append(where, "(r.asof, r.job_type, r.symbol) < (?, ?, ?)")
		args = append(args, c[0], c[1], c[2])
	}
	for _, c := range []struct{ col, v string }{{"r.job_type", f.JobType}, {"r.symbol", f.Symbol}} {
		if !sqldb.IsText(c.v) {
			// No day has such a value, and Postgres would refuse the
			// parameter: no page, on both engines.
			return RefusedPage{Days: []RefusedDay{}}, nil
		}
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	args = append(args, f.Limit+1)
	rows, err := s.DB.QueryContext(ctx, s.DB.Rebind(`SELECT r.asof, r.job_type, r.symbol, COALESCE(r.error_code, ''), COALESCE(r.error_message, ''), r.scheduled_at
		FROM pipeline_schedule_runs r WHERE `+strings.Join(where, " AND ")+`
		ORDER BY r.asof DESC, r.job_type DESC, r.symbol DESC LIMIT ?`), args...)
	if err != nil {
		return RefusedPage{}, unavailable(CodeRepoUnavailable, err)
	}
	defer rows.Close()
	p := RefusedPage{Days: []RefusedDay{}}
	for rows.Next() {
		var d RefusedDay
		var at int64
		if err := rows.Scan(&d.Asof, &d.JobType, &d.Symbol, &d.ErrorCode, &d.ErrorMessage, &at); err != nil {
			return RefusedPage{}, unavailable(CodeRepoUnavailable, err)
		}
		d.RefusedAt = sqldb.FromMicros(at)
		p.Days = append(p.Days, d)
	}
	if err := rows.Err(); err != nil {
		return RefusedPage{}, unavailable(CodeRepoUnavailable, err)
	}
	if len(p.Days) > f.Limit {
		p.Days = p.Days[:f.Limit]
		last := p.Days[f.Limit-1]
		p.NextCursor = encodeRefusedCursor(refusedCursor{last.Asof, last.JobType, last.Symbol})
	}
	if err := s.activeJobs(ctx, p.Days); err != nil {
		return RefusedPage{}, err
	}
	return p, nil
}

// activeJobs fills in the active job of each day's key, found through the
// unique index of active keys (one lookup for the page).
func (s *Store) activeJobs(ctx context.Context, days []RefusedDay) error {
	if len(days) == 0 {
		return nil
	}
	at := make(map[string]int, len(days))
	args := make([]any, 0, len(days))
	for i, d := range days {
		k := MakeIdempotencyKey(d.JobType, d.Symbol, d.Asof)
		at[k] = i
		args = append(args, k)
	}
	rows, err := s.DB.QueryContext(ctx, s.DB.Rebind(`SELECT idempotency_key, job_id FROM pipeline_jobs
		WHERE status IN (`+activeList+`) AND idempotency_key IN (`+strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")+`)`), args...)
	if err != nil {
		return unavailable(CodeRepoUnavailable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k, id string
		if err := rows.Scan(&k, &id); err != nil {
			return unavailable(CodeRepoUnavailable, err)
		}
		days[at[k]].ActiveJobID = id
	}
	return unavailable(CodeRepoUnavailable, rows.Err())
}

func encodeRefusedCursor(c refusedCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeRefusedCursor reads a cursor Refused made; anything else (text
// that is not UTF-8 among it) is refused.
func decodeRefusedCursor(v string) (refusedCursor, bool) {
	var c refusedCursor
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, false
	}
	for _, x := range c {
		if x == "" || !sqldb.IsText(x) {
			return c, false
		}
	}
	if _, err := ParseAsof(c[0]); err != nil {
		return c, false
	}
	return c, true
}
