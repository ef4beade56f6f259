package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
)

// TestDroppedClockIsMeasuredInTheBackground: a pod's wall clock is stepped,
// so its measurement of the database clock is dropped and taken again in
// the background; that measurement fails (the pool's one connection is
// held by a transaction). A later Time inside that transaction must not
// measure again itself: it would wait for a connection the transaction
// holds, and every caller of Time behind its lock with it. Postgres only:
// SQLite's clock is read without a connection.
func TestDroppedClockIsMeasuredInTheBackground(t *testing.T) {
	ctx := context.Background()
	one := poolOfOne(t)

	var wall atomic.Int64
	start := time.Now()
	q := &lease.Queue{DB: one, Spec: spec, Machine: machine,
		Now:     func() time.Time { return time.Now().Add(time.Duration(wall.Load())) },
		Elapsed: func() time.Duration { return time.Since(start) },
	}
	q.Time() // measured while the pool is free
	tx, err := one.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	wall.Store(int64(time.Hour))
	q.Time() // the step drops the measurement; the one taken again in the background gets no connection
	// The background measurement gives up after 5 s, and the next is not
	// tried before 5 s more.
	time.Sleep(10*time.Second + 500*time.Millisecond)
	began := time.Now()
	q.Time()
	if d := time.Since(began); d > time.Second {
		t.Errorf("Time inside a transaction holding the pool's one connection took %s", d)
	}
	_ = tx.Rollback()
	deadline := time.Now().Add(5 * time.Second)
	for lease.ClockDue(q) {
		if time.Now().After(deadline) {
			t.Fatal("the database clock was not measured again once a connection was free")
		}
		q.Time()
		time.Sleep(50 * time.Millisecond)
	}
}
