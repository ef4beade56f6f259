package inbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Filter selects a page of jobs for the console's job list; an empty
// Status matches every job.
type Filter struct {
	Status string
	Cursor string // opaque, from Page.NextCursor
	Limit  int    // 1-500, default 100
}

// Page is one keyset page of jobs, newest first.
type Page struct {
	Jobs       []*View
	NextCursor string
}

// ErrBadCursor is returned for a cursor List did not make.
var ErrBadCursor = errors.New("inbox: invalid cursor")

// maxCursorID bounds the id a cursor may carry: job ids are UUIDs, and
// a longer value was not made by List.
const maxCursorID = 64

// List returns jobs matching f, newest first, a page at a time. Job ids
// are UUIDv7, so their order is the order the jobs were created in, and
// the primary key serves the list: an index of its own on created_at
// would be one more entry written by every status change of every job,
// which the claim and complete path pays for (measured: 8–19 % of the
// Postgres burn-down) so that an operator's page is not sorted. The
// cursor is the previous page's last id, so a job written meanwhile never
// shifts a page, and a cursor carried to another status filter continues
// from the same point. Like Get, it never reads a credential column.
func (s *Store) List(ctx context.Context, f Filter) (Page, error) {
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 100
	}
	var where []string
	var args []any
	if f.Cursor != "" {
		id, err := decodeCursor(f.Cursor)
		if err != nil {
			return Page{}, err
		}
		where = append(where, "id < ?")
		args = append(args, id)
	}
	if f.Status != "" {
		if !sqldb.IsText(f.Status) {
			// No job has such a status, and Postgres would refuse the
			// parameter: no page, on both engines.
			return Page{Jobs: []*View{}}, nil
		}
		where = append(where, "status = ?")
		args = append(args, f.Status)
	}
	q := `SELECT ` + viewCols + ` FROM inbox_jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC LIMIT ?`
	rows, err := s.db.QueryContext(ctx, s.db.Rebind(q), append(args, f.Limit+1)...)
	if err != nil {
		return Page{}, fmt.Errorf("inbox: list: %w", err)
	}
	defer rows.Close()
	p := Page{Jobs: []*View{}}
	for rows.Next() {
		v, err := scanView(rows)
		if err != nil {
			return Page{}, fmt.Errorf("inbox: list: %w", err)
		}
		p.Jobs = append(p.Jobs, v)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("inbox: list: %w", err)
	}
	if len(p.Jobs) > f.Limit {
		p.Jobs = p.Jobs[:f.Limit]
		last := p.Jobs[f.Limit-1]
		p.NextCursor = encodeCursor(last.JobID)
	}
	return p, nil
}

func encodeCursor(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id))
}

// decodeCursor reads a cursor encodeCursor made; anything else (bytes
// that are not UTF-8 among them, which Postgres would refuse) is
// ErrBadCursor.
func decodeCursor(c string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(raw) == 0 || len(raw) > maxCursorID || !sqldb.IsText(string(raw)) {
		return "", ErrBadCursor
	}
	return string(raw), nil
}
