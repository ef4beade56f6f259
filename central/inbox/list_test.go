package inbox_test

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// pages follows NextCursor from the first page of f to the last and
// returns the job ids seen, in order.
func pages(t *testing.T, s *inbox.Store, f inbox.Filter) []string {
	t.Helper()
	var ids []string
	for range 100 {
		p, err := s.List(context.Background(), f)
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		if len(p.Jobs) > f.Limit {
			t.Fatalf("page of %d, limit %d", len(p.Jobs), f.Limit)
		}
		for _, j := range p.Jobs {
			ids = append(ids, j.JobID)
		}
		if p.NextCursor == "" {
			return ids
		}
		f.Cursor = p.NextCursor
	}
	t.Fatal("no last page")
	return nil
}

// TestListPages: List pages newest first (by id: UUIDv7), every job
// exactly once, jobs created in the same microsecond included; a status
// filter pages the same way; a cursor List did not make is ErrBadCursor;
// a cursor carried to another status continues from the same point.
func TestListPages(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy(), inbox.WithClock(clk.Now))
		req := addRequester(t, db)
		var ids []string // oldest first
		for i := range 7 {
			ids = append(ids, enqueue(t, s, req, 1)...)
			if i%3 == 2 {
				clk.Add(time.Second) // three jobs share each created_at
			}
		}
		failed := map[string]bool{ids[1]: true, ids[2]: true, ids[4]: true, ids[6]: true}
		for id := range failed {
			if _, err := db.ExecContext(ctx, db.Rebind(`UPDATE inbox_jobs SET status = ? WHERE id = ?`), schema.StatusFailed, id); err != nil {
				t.Fatal(err)
			}
		}
		// Newest first: the order the jobs were created in, reversed.
		var all, fail []string
		for _, id := range slices.Backward(ids) {
			all = append(all, id)
			if failed[id] {
				fail = append(fail, id)
			}
		}

		for _, limit := range []int{1, 2, 3, 7, 100} {
			if got := pages(t, s, inbox.Filter{Limit: limit}); !slices.Equal(got, all) {
				t.Errorf("limit %d: %v, want %v", limit, got, all)
			}
			if got := pages(t, s, inbox.Filter{Status: schema.StatusFailed, Limit: limit}); !slices.Equal(got, fail) {
				t.Errorf("failed, limit %d: %v, want %v", limit, got, fail)
			}
		}

		// A cursor from the failed list carried to the queued list: the
		// queued jobs after the same point, none skipped or repeated.
		p, err := s.List(ctx, inbox.Filter{Status: schema.StatusFailed, Limit: 1})
		if err != nil || p.NextCursor == "" {
			t.Fatalf("first failed page: %v %+v", err, p)
		}
		got := pages(t, s, inbox.Filter{Status: schema.StatusQueued, Cursor: p.NextCursor, Limit: 2})
		var queuedAfter []string
		for _, id := range all[slices.Index(all, fail[0])+1:] {
			if !failed[id] {
				queuedAfter = append(queuedAfter, id)
			}
		}
		if !slices.Equal(got, queuedAfter) {
			t.Errorf("carried cursor: %v, want %v", got, queuedAfter)
		}

		b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
		for _, c := range []string{"nope!", b64("\xff"), b64("a\x00b"), b64(strings.Repeat("a", 65)), p.NextCursor + "="} {
			if _, err := s.List(ctx, inbox.Filter{Cursor: c}); !errors.Is(err, inbox.ErrBadCursor) {
				t.Errorf("cursor %q: %v, want ErrBadCursor", c, err)
			}
		}
	})
}

// TestListUsesIndex: every page of the job list, with and without a
// status, is read through an index in the list's order, never by sorting
// the table.
func TestListUsesIndex(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		cols := `SELECT id FROM inbox_jobs`
		queries := map[string][]any{
			cols + ` ORDER BY id DESC LIMIT ?`:                             {10},
			cols + ` WHERE id < ? ORDER BY id DESC LIMIT ?`:                {"x", 10},
			cols + ` WHERE status = ? ORDER BY id DESC LIMIT ?`:            {"failed", 10},
			cols + ` WHERE id < ? AND status = ? ORDER BY id DESC LIMIT ?`: {"x", "failed", 10},
		}
		for q, args := range queries {
			plan := explain(t, db, ctx, q, args...)
			if !strings.Contains(plan, "inbox_jobs_pkey") && !strings.Contains(plan, "sqlite_autoindex_inbox_jobs_1") {
				t.Errorf("%s: not read through the primary key:\n%s", q, plan)
			}
			if strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "Sort") {
				t.Errorf("%s: sorts:\n%s", q, plan)
			}
		}
	})
}

// explain is the engine's plan of q. Postgres is told to avoid table
// scans and sorts, which on a table of a few rows it would prefer: the
// question is whether an index can serve the query in order at all.
func explain(t *testing.T, db *sqldb.DB, ctx context.Context, q string, args ...any) string {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	prefix := "EXPLAIN QUERY PLAN "
	if db.Engine == sqldb.Postgres {
		prefix = "EXPLAIN "
		for _, k := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort"} {
			if _, err := conn.ExecContext(ctx, "SET "+k+" = off"); err != nil {
				t.Fatal(err)
			}
			defer conn.ExecContext(ctx, "RESET "+k) //nolint:errcheck
		}
	}
	rows, err := conn.QueryContext(ctx, db.Rebind(prefix+q), args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
	}
	return strings.Join(out, "\n")
}
