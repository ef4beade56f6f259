package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

const table = `-- +goose Up
CREATE TABLE work (
    id TEXT PRIMARY KEY, status TEXT NOT NULL, worker_id TEXT, lease_expires_at BIGINT, heartbeat_at BIGINT,
    claim_version BIGINT NOT NULL DEFAULT 0, attempt_count INTEGER NOT NULL DEFAULT 0,
    ready_at BIGINT NOT NULL DEFAULT 0, seq BIGINT NOT NULL DEFAULT 0, note TEXT);
`

var migrations = sqldb.Migrations{
	Postgres: fstest.MapFS{"00001_work.sql": {Data: []byte(table)}},
	SQLite:   fstest.MapFS{"00001_work.sql": {Data: []byte(table)}},
}

var machine = lease.Transitions{Machine: "work", Terminal: []string{"done"}, Allowed: map[string][]string{
	"ready": {"taken"}, "taken": {"busy", "ready"}, "busy": {"done", "ready"},
}}

var spec = lease.Spec{Table: "work", ID: "id", Status: "status", WorkerID: "worker_id", LeaseExpires: "lease_expires_at",
	HeartbeatAt: "heartbeat_at", ClaimVersion: "claim_version", AttemptCount: "attempt_count", ReadyAt: "ready_at",
	Sequence: "seq", Order: "id", Ready: "ready", Claimed: "taken", Leased: []string{"taken", "busy"}, Requeue: "ready"}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func setup(t *testing.T, db *sqldb.DB, n int) (*lease.Queue, *clock) {
	t.Helper()
	err := db.Tx(context.Background(), func(tx *sql.Tx) error {
		for i := 0; i < n; i++ {
			if _, err := tx.Exec(db.Rebind(`INSERT INTO work (id, status) VALUES (?, 'ready')`), fmt.Sprintf("w%04d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	return &lease.Queue{DB: db, Spec: spec, Machine: machine, Now: clk.now}, clk
}

func TestClaimIsExclusiveUnderConcurrency(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		const rows = 400
		q, _ := setup(t, db, rows)
		var mu sync.Mutex
		owner := map[string]int{}
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					cs, err := q.Claim(context.Background(), fmt.Sprint("worker", w), 5, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					if len(cs) == 0 {
						return
					}
					mu.Lock()
					for _, c := range cs {
						if _, dup := owner[c.ID]; dup {
							t.Errorf("%s claimed twice", c.ID)
						}
						owner[c.ID] = w
						if c.Version != 1 || c.Attempt != 1 || c.Seq != 1 || c.Status != "taken" {
							t.Errorf("claim fields %+v", c)
						}
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(owner) != rows {
			t.Fatalf("claimed %d of %d", len(owner), rows)
		}
	})
}

func TestHeartbeatReclaimAndFencing(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		q, clk := setup(t, db, 1)
		a, err := q.Claim(ctx, "A", 1, 10*time.Second)
		if err != nil || len(a) != 1 {
			t.Fatalf("claim: %v", err)
		}
		ca := a[0]
		if err := db.Tx(ctx, func(tx *sql.Tx) error { return q.Move(ctx, tx, &ca, "busy", clk.now(), "note = ?", "A was here") }); err != nil {
			t.Fatal(err)
		}
		clk.add(8 * time.Second)
		if err := q.Heartbeat(ctx, &ca, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		clk.add(8 * time.Second) // 16s after the claim, 8s after the heartbeat: still leased
		if got, _ := q.Claim(ctx, "B", 1, 10*time.Second); len(got) != 0 {
			t.Fatal("claimed a row under a live lease")
		}
		clk.add(3 * time.Second)
		b, err := q.Claim(ctx, "B", 1, 10*time.Second)
		if err != nil || len(b) != 1 {
			t.Fatalf("reclaim: %v %d", err, len(b))
		}
		cb := b[0]
		// busy -> (expired) ready -> taken: two versions later, a new attempt.
		if cb.Version != ca.Version+2 || cb.Attempt != 2 || cb.Seq != ca.Seq+2 {
			t.Fatalf("reclaimed claim %+v after %+v", cb, ca)
		}
		stale := []error{
			q.Heartbeat(ctx, &ca, time.Minute),
			db.Tx(ctx, func(tx *sql.Tx) error { return q.Exec(ctx, tx, &ca, "note = ?", "late") }),
			db.Tx(ctx, func(tx *sql.Tx) error { return q.Move(ctx, tx, &ca, "done", clk.now(), "") }),
		}
		for i, err := range stale {
			var se *lease.StaleError
			if !errors.As(err, &se) || !errors.Is(err, lease.ErrStale) || se.Version != ca.Version {
				t.Errorf("write %d by the stale worker: %v", i, err)
			}
		}
		var note string
		_ = db.QueryRow(`SELECT note FROM work`).Scan(&note)
		if note != "A was here" {
			t.Fatalf("stale write landed: %q", note)
		}
		// Invalid moves are rejected before touching the row.
		err = db.Tx(ctx, func(tx *sql.Tx) error { return q.Move(ctx, tx, &cb, "done", clk.now(), "") })
		if !errors.Is(err, lease.ErrInvalidTransition) {
			t.Fatalf("taken -> done: %v", err)
		}
	})
}

func TestMoveManyFencesEachRow(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		q, clk := setup(t, db, 250)
		cs, err := q.Claim(ctx, "A", 250, time.Minute)
		if err != nil || len(cs) != 250 {
			t.Fatalf("claim %d: %v", len(cs), err)
		}
		ptrs := make([]*lease.Claim, len(cs))
		for i := range cs {
			ptrs[i] = &cs[i]
		}
		// Fence off two rows behind the worker's back.
		if _, err := db.Exec(db.Rebind(`UPDATE work SET claim_version = claim_version + 1 WHERE id IN (?, ?)`), cs[3].ID, cs[200].ID); err != nil {
			t.Fatal(err)
		}
		var st []*lease.Claim
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			var err error
			st, err = q.MoveMany(ctx, tx, ptrs, []string{"busy", "done"}, clk.now(), "note = ?", "batch")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != 2 || st[0].ID != cs[3].ID || st[1].ID != cs[200].ID {
			t.Fatalf("stale rows: %v", st)
		}
		var done int
		_ = db.QueryRow(`SELECT COUNT(*) FROM work WHERE status = 'done' AND seq = 3 AND note = 'batch'`).Scan(&done)
		if done != 248 || cs[0].Status != "done" || cs[0].Seq != 3 {
			t.Fatalf("done %d, claim %+v", done, cs[0])
		}
		if _, err := q.MoveMany(ctx, db, ptrs[:1], []string{"ready", "done"}, clk.now(), ""); !errors.Is(err, lease.ErrInvalidTransition) {
			t.Fatalf("invalid path: %v", err)
		}
	})
}
