package pipeline

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// faultConn is a real connection whose statements fail with the error
// fail returns for their text (nil: run as usual).
type faultConn struct {
	driver.Conn
	fail func(query string) error
}

func (c *faultConn) Prepare(q string) (driver.Stmt, error) {
	if err := c.fail(q); err != nil {
		return nil, err
	}
	return c.Conn.Prepare(q)
}

func (c *faultConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	if err := c.fail(q); err != nil {
		return nil, err
	}
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, q)
	}
	return c.Conn.Prepare(q)
}

func (c *faultConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.fail(q); err != nil {
		return nil, err
	}
	if e, ok := c.Conn.(driver.ExecerContext); ok {
		return e.ExecContext(ctx, q, args)
	}
	return nil, driver.ErrSkip
}

func (c *faultConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.fail(q); err != nil {
		return nil, err
	}
	if e, ok := c.Conn.(driver.QueryerContext); ok {
		return e.QueryContext(ctx, q, args)
	}
	return nil, driver.ErrSkip
}

func (c *faultConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("faultConn: the driver has no BeginTx")
	}
	return b.BeginTx(ctx, opts)
}

func (c *faultConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// faultDB is a handle on db's database whose statements fail as fail says.
func faultDB(t *testing.T, db *sqldb.DB, fail func(query string) error) *sqldb.DB {
	return wrapDB(t, db, func(c driver.Conn) driver.Conn { return &faultConn{Conn: c, fail: fail} })
}

// §3.3, §5.1: the scheduler is a producer, and a producer retries
// QUEUE_UNAVAILABLE with exponential back-off — not at its next tick (an
// hour here) — logging each failed enqueue with the job's tracing fields
// (§8); once the queue answers again the day is enqueued.
func TestSchedulerBacksOffWhileTheQueueIsUnavailable(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC))
		f := newFixture(t, db, clk.Now)
		var down atomic.Bool
		var refused atomic.Int64
		down.Store(true)
		h := faultDB(t, db, func(q string) error {
			if down.Load() && strings.Contains(q, "INSERT INTO pipeline_schedule_runs") {
				refused.Add(1)
				return fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)
			}
			return nil
		})
		st := NewStore(h, clk.Now)
		st.Types, st.Log = f.types, f.store.Log
		s := &Scheduler{Store: st, At: 2 * time.Hour, Now: clk.Now, CatchupDays: 1, Tick: time.Hour, Log: f.store.Log,
			Entries: []ScheduleEntry{{JobType: "noop", Symbols: FixedSymbols([]string{"AAPL"})}}}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Run(rctx) }()
		defer func() { cancel(); <-done }()

		waitFor(t, 15*time.Second, "three refused enqueues", func() bool { return refused.Load() >= 3 })
		down.Store(false)
		waitFor(t, 15*time.Second, "the day enqueued", func() bool {
			p, err := f.store.List(ctx, Filter{})
			return err == nil && len(p.Jobs) == 1 && p.Jobs[0].Asof == "2026-03-09"
		})

		key := MakeIdempotencyKey("noop", "AAPL", "2026-03-09")
		var jobLines, runLines int
		for _, line := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			if rec["msg"] == "pipeline scheduler: will retry" {
				runLines++
			}
			if rec["error_code"] != CodeQueueUnavailable || rec["job_id"] == nil {
				continue
			}
			jobLines++
			if v, _ := rec["job_id"].(string); v == "" || rec["idempotency_key"] != key || rec["symbol"] != "AAPL" || rec["asof"] != "2026-03-09" {
				t.Errorf("log line lacks the job's tracing fields: %s", line)
			}
		}
		// Each failed run stopped at its first enqueue, which names its job.
		if jobLines < 2 || jobLines != runLines {
			t.Fatalf("%d QUEUE_UNAVAILABLE lines naming the job for %d failed runs:\n%s", jobLines, runLines, f.logs.String())
		}
	})
}
