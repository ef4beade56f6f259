package pipeline

import (
	"context"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

var migrationSets = []sqldb.Migrations{ingest.Migrations(), Migrations()}

func eachEngine(t *testing.T, body func(t *testing.T, db *sqldb.DB)) {
	sqltest.Each(t, migrationSets, body)
}

// clock is a settable clock for tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type fixture struct {
	db    *sqldb.DB
	store *Store
	types *Registry
	logs  *testsvc.LogBuffer
}

func newFixture(t testing.TB, db *sqldb.DB, now func() time.Time) *fixture {
	t.Helper()
	f := &fixture{db: db, types: NewRegistry(), logs: &testsvc.LogBuffer{}}
	f.store = NewStore(db, now)
	f.store.Backoff = lease.Backoff{Base: time.Millisecond, Cap: time.Millisecond}
	f.store.Types = f.types
	_ = f.types.Register(JobType{Name: "noop", Runner: Pipeline{stage("storage", "noop", nil, nil)}})
	f.store.Log = slog.New(slog.NewJSONHandler(f.logs, nil))
	if err := f.store.LeaseQueue().Validate(); err != nil {
		t.Fatal(err)
	}
	return f
}

// register adds a Go job type whose stages are fns, in order.
func (f *fixture) register(t testing.TB, name string, stages ...Stage) {
	t.Helper()
	if err := f.types.Register(JobType{Name: name, Runner: Pipeline(stages)}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) submit(t testing.TB, typ, sym, asof string) Created {
	t.Helper()
	c, err := f.store.Submit(context.Background(), Request{JobType: typ, Symbol: sym, Asof: asof, RequestedBy: "test"})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return c
}

func (f *fixture) get(t testing.TB, id string) JobRecord {
	t.Helper()
	j, err := f.store.GetByID(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j
}

// makeDue moves job id's visible time a minute back, for a claim by
// another store: the writing store's estimate of the database clock and
// the claiming one's are each off by up to half a round trip, so on a busy
// machine a job made visible "now" by one can lie a few milliseconds in
// the other's future, for its next poll to take.
func makeDue(t testing.TB, db *sqldb.DB, id string) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), db.Rebind(`UPDATE pipeline_jobs SET visible_at = visible_at - ? WHERE job_id = ?`), time.Minute.Microseconds(), id); err != nil {
		t.Fatal(err)
	}
}

// runUntil runs a worker until cond holds.
func (f *fixture) runUntil(t testing.TB, vis time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWorker(f.store, f.types, WorkerConfig{ID: "w-test", Visibility: vis, Concurrency: 4, Poll: 20 * time.Millisecond})
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, 20*time.Second, what, cond)
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stage returns a stage that returns out (or err) and counts its runs.
func stage(name string, out any, err error, runs *atomic.Int64) Stage {
	return StageFunc{StageName: name, Fn: func(ctx context.Context, m JobMessage, in any) (any, error) {
		if runs != nil {
			runs.Add(1)
		}
		return out, err
	}}
}

// dbURL is a URL another process (or handle) opens the same database with.
func dbURL(t testing.TB, db *sqldb.DB) string {
	if db.Engine == sqldb.SQLite {
		return "sqlite:" + db.Path
	}
	var name string
	if err := db.QueryRowContext(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testsvc.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
