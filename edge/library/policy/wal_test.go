package policy_test

import (
	"context"
	"os"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

const walThreshold = 256 << 10

// walSize is the size of the store's real -wal file.
func (e *env) walSize() int64 {
	e.t.Helper()
	st, err := os.Stat(e.st.Path + "-wal")
	if err != nil {
		e.t.Fatal(err)
	}
	return st.Size()
}

// truncateWAL empties the -wal file so a test starts below any threshold.
func (e *env) truncateWAL() {
	e.t.Helper()
	var busy, logFrames, done int64
	if err := e.st.DB.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &done); err != nil || busy != 0 {
		e.t.Fatalf("truncate wal: busy=%d err=%v", busy, err)
	}
	if n := e.walSize(); n != 0 {
		e.t.Fatalf("wal is %d bytes after TRUNCATE", n)
	}
}

// growWAL writes rows until the -wal file is larger than limit.
func (e *env) growWAL(limit int64) {
	e.t.Helper()
	if _, err := e.st.DB.Exec(`CREATE TABLE IF NOT EXISTS filler(b BLOB)`); err != nil {
		e.t.Fatal(err)
	}
	for e.walSize() <= limit {
		if _, err := e.st.DB.Exec(`INSERT INTO filler(b) VALUES (randomblob(16384))`); err != nil {
			e.t.Fatal(err)
		}
	}
}

func TestCheckWALSchedulesPastThreshold(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	wal := e.st.Path + "-wal"
	e.truncateWAL()

	// Below the threshold nothing is scheduled.
	e.growWAL(walThreshold / 4)
	if ok, err := e.p.CheckWAL(ctx, wal, walThreshold, store.ModeTruncate); ok || err != nil {
		t.Fatalf("below threshold (%d bytes): scheduled=%v err=%v", e.walSize(), ok, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM wal_maintenance_jobs`); n != 0 {
		t.Fatalf("%d rows below threshold", n)
	}

	e.growWAL(walThreshold)
	// A zero threshold disables the check, and a missing file is no error.
	if ok, err := e.p.CheckWAL(ctx, wal, 0, store.ModeTruncate); ok || err != nil {
		t.Fatalf("threshold 0: scheduled=%v err=%v", ok, err)
	}
	if ok, err := e.p.CheckWAL(ctx, wal+".absent", 1, store.ModeTruncate); ok || err != nil {
		t.Fatalf("absent file: scheduled=%v err=%v", ok, err)
	}

	ok, err := e.p.CheckWAL(ctx, wal, walThreshold, store.ModeTruncate)
	if !ok || err != nil {
		t.Fatalf("past threshold (%d bytes): scheduled=%v err=%v", e.walSize(), ok, err)
	}
	var mode, status string
	var after int64
	e.st.DB.QueryRow(`SELECT requested_mode, status, execute_after FROM wal_maintenance_jobs`).Scan(&mode, &status, &after)
	if mode != store.ModeTruncate || status != store.StatusPending || after != t0 || e.wakes.Load() != 1 {
		t.Fatalf("scheduled row %s %s after=%d wakes=%d", mode, status, after, e.wakes.Load())
	}

	// While one checkpoint is queued, running or waiting to retry, no
	// second one is scheduled; once it is finished, the next check may.
	for _, c := range []struct {
		status   string
		schedule bool
	}{
		{store.StatusPending, false},
		{store.StatusRunning, false},
		{store.StatusRetryable, false},
		{store.StatusCompleted, true},
		{store.StatusFailed, true},
	} {
		t.Run(c.status, func(t *testing.T) {
			if _, err := e.st.DB.Exec(`DELETE FROM wal_maintenance_jobs`); err != nil {
				t.Fatal(err)
			}
			e.insert("wal_maintenance_jobs", map[string]any{"requested_mode": store.ModeTruncate, "status": c.status})
			ok, err := e.p.CheckWAL(ctx, wal, walThreshold, store.ModeTruncate)
			if err != nil || ok != c.schedule {
				t.Fatalf("with a %s row: scheduled=%v err=%v, want %v", c.status, ok, err, c.schedule)
			}
			want := 1
			if c.schedule {
				want = 2
			}
			if n := e.count(`SELECT COUNT(*) FROM wal_maintenance_jobs`); n != want {
				t.Fatalf("%d rows, want %d", n, want)
			}
		})
	}
}

func TestSchedulerTickChecksWAL(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.truncateWAL()
	e.growWAL(walThreshold)
	s := policySched(e)
	for i := 0; i < 3; i++ {
		if err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM wal_maintenance_jobs WHERE status = 'pending' AND requested_mode = 'restart'`); n != 1 {
		t.Fatalf("%d checkpoints scheduled by three ticks, want 1", n)
	}
}
