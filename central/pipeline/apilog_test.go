package pipeline

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// §8: every log line about a job carries job_id, idempotency_key, symbol
// and asof. A submit that finds the queue unavailable has its message (and
// its job id) before the first try, so its retry lines and its final
// QUEUE_UNAVAILABLE line carry them too.
func TestSubmitUnavailableLogsTracingFields(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		e := daemon.NewEcho(f.store.Log)
		a := &API{Store: f.store, Log: f.store.Log, Attempts: 3, Backoff: lease.Backoff{Base: 10 * time.Millisecond, Cap: 10 * time.Millisecond},
			Budget: 1500 * time.Millisecond}
		a.Mount(e, func(next echo.HandlerFunc) echo.HandlerFunc { return next })
		srv := httptest.NewServer(e)
		defer srv.Close()

		// Another connection holds what the submit needs: the write lock on
		// SQLite, an uncommitted row of the same key on Postgres.
		conn, err := db.DB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		m := f.store.Message(Request{JobType: "noop", Symbol: "AAPL", Asof: "2026-01-02", RequestedBy: "other"})
		if db.Engine == sqldb.SQLite {
			_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		} else {
			if _, err = conn.ExecContext(ctx, "BEGIN"); err == nil {
				_, err = conn.ExecContext(ctx, `INSERT INTO pipeline_jobs (job_id, idempotency_key, job_type, symbol, asof, requested_by,
					status, max_attempts, visible_at, created_at, updated_at) VALUES ($1, $2, 'noop', 'AAPL', '2026-01-02', 'other', 'queued', 5, 0, 0, 0)`,
					m.JobID, m.IdempotencyKey)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(srv.URL+"/v1/pipeline/jobs", "application/json",
			strings.NewReader(`{"job_type":"noop","symbol":"AAPL","asof":"2026-01-02"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("submit: %d, want 503", resp.StatusCode)
		}
		f.store.Wait()
		var lines int
		for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["error_code"] != CodeQueueUnavailable {
				continue
			}
			lines++
			for _, k := range []string{"job_id", "idempotency_key", "symbol", "asof"} {
				if v, _ := rec[k].(string); v == "" {
					t.Errorf("log line lacks %s: %s", k, line)
				}
			}
			if rec["idempotency_key"] != m.IdempotencyKey || rec["symbol"] != "AAPL" || rec["asof"] != "2026-01-02" {
				t.Errorf("log line names another job: %s", line)
			}
		}
		if lines < 2 {
			t.Fatalf("want the retry and the final QUEUE_UNAVAILABLE lines, got %d:\n%s", lines, f.logs.String())
		}
	})
}
