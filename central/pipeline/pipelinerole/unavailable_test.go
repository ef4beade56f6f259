package pipelinerole

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

type ready struct {
	status int
	body   map[string]string
}

func getReady(t *testing.T, s *server) ready {
	t.Helper()
	resp, err := http.Get(s.url + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&b)
	return ready{resp.StatusCode, b}
}

func submitStatus(t *testing.T, s *server, asof string) (int, string, string) {
	t.Helper()
	var e apiErr
	resp := s.do(t, "POST", "/v1/pipeline/jobs", map[string]string{"job_type": "edge_daily", "symbol": "edge-1", "asof": asof}, &e)
	return resp.StatusCode, e.Error.Code, resp.Header.Get("Retry-After")
}

// §7 "Queue down" and "/ready" on Postgres: the real server behind a TCP
// proxy the test cuts. Enqueue answers 503 QUEUE_UNAVAILABLE with
// Retry-After (after retrying within its budget, logged), never 500;
// /ready is 503 with the §6 body; restored, both recover.
func TestDatabaseDownPostgres(t *testing.T) {
	ctx := context.Background()
	_, db, p := proxiedPostgres(t)
	cfg := testConfig()
	cfg.AuthCache = 0 // the operator lookup itself meets the outage (a cached token skips it)
	s := newServer(t, db, cfg)
	if r := getReady(t, s); r.status != 200 || r.body["queue"] != "ok" || r.body["repo"] != "ok" || r.body["timestamp"] == "" || r.body["database"] != "ok" {
		t.Fatalf("up: %+v", r)
	}
	if st, _, _ := submitStatus(t, s, "2026-01-01"); st != 202 {
		t.Fatalf("up: submit %d", st)
	}

	p.cut()
	start := time.Now()
	st, code, ra := submitStatus(t, s, "2026-01-02")
	if st != 503 || code != pipeline.CodeQueueUnavailable || ra == "" {
		t.Fatalf("down: %d %s Retry-After %q", st, code, ra)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("down: answered after %v", time.Since(start))
	}
	if n := strings.Count(s.logs.String(), "unreachable; retrying"); n < 1 {
		t.Fatalf("no retry logged:\n%s", s.logs.String())
	}
	// The queue itself (past the operator lookup) says the same.
	_, err := s.role.Store.Submit(ctx, pipeline.Request{JobType: "edge_daily", Symbol: "edge-1", Asof: "2026-01-03", RequestedBy: "t"})
	var ue *pipeline.UnavailableError
	if !errors.As(err, &ue) || ue.Code != pipeline.CodeQueueUnavailable {
		t.Fatalf("down: submit %v", err)
	}
	r := getReady(t, s)
	if r.status != 503 || !strings.HasPrefix(r.body["queue"], "error(") || !strings.HasPrefix(r.body["repo"], "error(") || r.body["timestamp"] == "" {
		t.Fatalf("down: /ready %+v", r)
	}
	for _, k := range []string{"queue", "repo"} {
		if reason := strings.TrimSuffix(strings.TrimPrefix(r.body[k], "error("), ")"); !oneOf(reason, sqldb.ReasonConnRefused, sqldb.ReasonConnLost, sqldb.ReasonTimeout) {
			t.Fatalf("down: %s reason %q", k, reason)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, r.body["timestamp"]); err != nil {
		t.Fatalf("timestamp %q", r.body["timestamp"])
	}

	p.restore(t)
	waitFor(t, "/ready 200", func() bool { return getReady(t, s).status == 200 })
	if st, _, _ := submitStatus(t, s, "2026-01-02"); st != 202 {
		t.Fatalf("restored: submit %d", st)
	}
}

// proxiedPostgres opens a fresh migrated Postgres database twice: direct,
// and db through a proxy the test can cut (connect timeout one second).
func proxiedPostgres(t *testing.T) (direct, db *sqldb.DB, p *proxy) {
	t.Helper()
	ctx := context.Background()
	direct = sqltest.Open(t, sqldb.Postgres, sets...)
	var name string
	_ = direct.QueryRowContext(ctx, "SELECT current_database()").Scan(&name)
	u, _ := url.Parse(testsvcPostgresURL())
	p = newProxy(t, u.Host)
	u.Host, u.Path = p.addr, "/"+name
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	db, err := sqldb.Open(ctx, u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return direct, db, p
}

// A submit whose connection breaks while its insert is on the server, with
// the server then out of reach, cannot learn whether the insert committed:
// it answers 503 QUEUE_UNAVAILABLE without trying again (each try would
// wait out the same settling), within its budget and the settle's bound.
// Once the server is back, the retry with the same key leaves one job.
func TestSubmitLostMidStatementPostgres(t *testing.T) {
	ctx := context.Background()
	direct, db, p := proxiedPostgres(t)
	cfg := testConfig()
	cfg.EnqueueTimeout = 3 * time.Second
	s := newServer(t, db, cfg)
	if st, _, _ := submitStatus(t, s, "2026-01-01"); st != 202 { // also caches the operator token
		t.Fatalf("up: submit %d", st)
	}
	// The insert waits on the server, its statement sent, until the cut.
	hold, err := direct.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback() }()
	if _, err := hold.ExecContext(ctx, `LOCK TABLE pipeline_jobs IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	cut := time.AfterFunc(300*time.Millisecond, p.cut)
	defer cut.Stop()
	start := time.Now()
	st, code, ra := submitStatus(t, s, "2026-01-05")
	took := time.Since(start)
	if st != 503 || code != pipeline.CodeQueueUnavailable || ra == "" {
		t.Fatalf("lost: %d %s Retry-After %q", st, code, ra)
	}
	if took > cfg.EnqueueTimeout+3*time.Second {
		t.Fatalf("lost: answered after %v", took)
	}
	if n := strings.Count(s.logs.String(), "pipeline enqueue: queue unavailable; retrying"); n != 0 {
		t.Fatalf("%d retries after an outcome that could not be settled:\n%s", n, s.logs.String())
	}
	_ = hold.Rollback()
	p.restore(t)
	waitFor(t, "/ready 200", func() bool { return getReady(t, s).status == 200 })
	if st, _, _ := submitStatus(t, s, "2026-01-05"); st != 202 {
		t.Fatalf("restored: submit %d", st)
	}
	var n int
	if err := direct.QueryRowContext(ctx, `SELECT COUNT(*) FROM pipeline_jobs WHERE asof = '2026-01-05'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d jobs for the key (%v), want 1", n, err)
	}
}

// The same on SQLite, where "unreachable" is the embedded file locked by
// another process (a backup, a stuck writer): a separate connection holds
// the write lock. Enqueue answers 503 QUEUE_UNAVAILABLE within its budget;
// /ready reports the queue error(database_locked) (reads still work, so
// repo stays ok) and is 503; released, both recover.
func TestDatabaseDownSQLite(t *testing.T) {
	ctx := context.Background()
	db := sqltest.Open(t, sqldb.SQLite, sets...)
	s := newServer(t, db, testConfig())
	if r := getReady(t, s); r.status != 200 {
		t.Fatalf("up: %+v", r)
	}
	other, err := sql.Open("sqlite", sqldb.SQLiteDSN(db.Path))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st, code, ra := submitStatus(t, s, "2026-01-02")
	if st != 503 || code != pipeline.CodeQueueUnavailable || ra == "" {
		t.Fatalf("locked: %d %s %q", st, code, ra)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("locked: answered after %v", time.Since(start))
	}
	r := getReady(t, s)
	if r.status != 503 || !oneOf(r.body["queue"], "error("+sqldb.ReasonLocked+")", "error("+sqldb.ReasonTimeout+")") || r.body["repo"] != "ok" {
		t.Fatalf("locked: /ready %+v", r)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	waitFor(t, "/ready 200", func() bool { return getReady(t, s).status == 200 })
	if st, _, _ := submitStatus(t, s, "2026-01-02"); st != 202 {
		t.Fatalf("released: submit %d", st)
	}
}

func oneOf(v string, set ...string) bool {
	for _, s := range set {
		if v == s {
			return true
		}
	}
	return false
}
