package executor_test

import (
	"context"
	"database/sql"
	"os"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

func walSize(t *testing.T, e *env) int64 {
	t.Helper()
	st, err := os.Stat(e.st.Path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// growWAL writes rows until the -wal file is larger than limit bytes.
func growWAL(t *testing.T, e *env, limit int64) {
	t.Helper()
	if _, err := e.st.DB.Exec(`CREATE TABLE IF NOT EXISTS filler(b BLOB)`); err != nil {
		t.Fatal(err)
	}
	for walSize(t, e) <= limit {
		if _, err := e.st.DB.Exec(`INSERT INTO filler(b) VALUES (randomblob(16384))`); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWALThresholdCheckpointTruncates runs the whole size-triggered path on
// a real WAL file: the policy schedules a checkpoint once the file is past
// the threshold, the executor's TRUNCATE checkpoint empties it, and the
// next check schedules nothing.
func TestWALThresholdCheckpointTruncates(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	wal := e.st.Path + "-wal"
	const threshold = 256 << 10
	growWAL(t, e, threshold)
	if ok, err := e.p.CheckWAL(ctx, wal, threshold, store.ModeTruncate); !ok || err != nil {
		t.Fatalf("scheduled=%v err=%v at %d bytes", ok, err, walSize(t, e))
	}
	if did, err := e.x.RunWALOnce(ctx); !did || err != nil {
		t.Fatalf("did=%v err=%v", did, err)
	}
	var status string
	var busy, logFrames, done int64
	e.st.DB.QueryRow(`SELECT status, checkpoint_busy, checkpoint_log_frames, checkpointed_frames FROM wal_maintenance_jobs`).
		Scan(&status, &busy, &logFrames, &done)
	// TRUNCATE reports the emptied log: 0 frames, all checkpointed.
	if status != store.StatusCompleted || busy != 0 || done != logFrames {
		t.Fatalf("checkpoint %s busy=%d log=%d done=%d", status, busy, logFrames, done)
	}
	// Only the frames of the row's own completion follow the truncation.
	if n := walSize(t, e); n > 64<<10 {
		t.Fatalf("wal still %d bytes after TRUNCATE", n)
	}
	if ok, _ := e.p.CheckWAL(ctx, wal, threshold, store.ModeTruncate); ok {
		t.Fatal("checkpoint scheduled again below the threshold")
	}
}

// TestBusyCheckpointStaysRetryablePastRetryCeiling holds a read transaction
// open on another connection so TRUNCATE and RESTART checkpoints report busy.
// §4.5: every busy attempt, including those past MaxWALRetries, becomes
// retryable with backoff and keeps the attempt's checkpoint stats; past the
// ceiling the backoff is the larger bucket. Once the reader is gone the same
// row completes.
func TestBusyCheckpointStaysRetryablePastRetryCeiling(t *testing.T) {
	for _, mode := range []string{store.ModeTruncate, store.ModeRestart} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, true)
			clock := fixClock(e)
			e.x.MaxWALRetries = 3
			ctx := context.Background()
			if _, err := e.st.DB.Exec(`INSERT INTO jobs(kind, status) VALUES ('delete','completed')`); err != nil {
				t.Fatal(err)
			}

			reader, err := sql.Open("sqlite", store.DSN(e.st.Path))
			if err != nil {
				t.Fatal(err)
			}
			defer reader.Close()
			rtx, err := reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer rtx.Rollback()
			var n int
			if err := rtx.QueryRow(`SELECT COUNT(*) FROM jobs`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			// commits after the reader's snapshot keep it on the WAL
			if _, err := e.st.DB.Exec(`INSERT INTO jobs(kind, status) VALUES ('delete','completed')`); err != nil {
				t.Fatal(err)
			}

			w, err := e.p.EnqueueWAL(ctx, mode)
			if err != nil {
				t.Fatal(err)
			}
			const attempts = 5 // two past the ceiling
			for attempt := 1; attempt <= attempts; attempt++ {
				if did, err := e.x.RunWALOnce(ctx); !did || err != nil {
					t.Fatalf("attempt %d: did=%v err=%v", attempt, did, err)
				}
				var status string
				var code *string
				var retries int64
				var after, busy, logFrames, done, fin *int64
				e.st.DB.QueryRow(`SELECT status, error_code, retry_count, retry_after, checkpoint_busy, checkpoint_log_frames,
checkpointed_frames, finished_at FROM wal_maintenance_jobs WHERE id = ?`, w.ID).
					Scan(&status, &code, &retries, &after, &busy, &logFrames, &done, &fin)
				now := clock.Load()
				if status != store.StatusRetryable || deref(code) != executor.CodeCheckpointBusy || retries != int64(attempt) ||
					fin == nil || *fin != now || after == nil || *after < now {
					t.Fatalf("attempt %d: %s code=%q retries=%d finished=%v after=%v", attempt, status, deref(code), retries, derefI(fin), derefI(after))
				}
				// The audit fields of the busy attempt are kept (§4.5, §7.5 retry path).
				if busy == nil || *busy == 0 || logFrames == nil || done == nil {
					t.Fatalf("attempt %d: busy=%v log=%v done=%v", attempt, derefI(busy), derefI(logFrames), derefI(done))
				}
				if attempt >= e.x.MaxWALRetries {
					least := e.x.Retry.Ceiling(attempt)
					if e.x.Retry.Ceiling(attempt+2) <= least {
						least /= 2 // at the cap, the larger bucket jitters in [Cap/2, Cap)
					}
					if min := least.Milliseconds(); *after-now < min {
						t.Fatalf("attempt %d past the ceiling: backoff %dms, want at least %dms", attempt, *after-now, min)
					}
				}
				// Not claimable before retry_after...
				if *after > now {
					if did, _ := e.x.RunWALOnce(ctx); did {
						t.Fatalf("attempt %d: claimed before retry_after", attempt)
					}
				}
				// ...and claimable once it has passed.
				clock.Store(*after + 1)
			}

			// With the reader gone the same row completes.
			rtx.Rollback()
			if did, err := e.x.RunWALOnce(ctx); !did || err != nil {
				t.Fatalf("did=%v err=%v", did, err)
			}
			var status string
			var retries int64
			var busy *int64
			var code *string
			e.st.DB.QueryRow(`SELECT status, retry_count, checkpoint_busy, error_code FROM wal_maintenance_jobs WHERE id = ?`, w.ID).
				Scan(&status, &retries, &busy, &code)
			if status != store.StatusCompleted || retries != attempts || busy == nil || *busy != 0 || code != nil {
				t.Fatalf("checkpoint without readers: %s retries=%d busy=%v code=%q", status, retries, derefI(busy), deref(code))
			}
		})
	}
}

// TestCheckpointRestoresBusyTimeout: the checkpoint shortens the busy
// timeout of the connection it runs on; with one pooled connection, that
// connection serves the next writer, which must wait as long as before.
func TestCheckpointRestoresBusyTimeout(t *testing.T) {
	for _, mode := range []string{store.ModePassive, store.ModeTruncate} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, false)
			ctx := context.Background()
			e.st.DB.SetMaxOpenConns(1)
			var before int64
			if err := e.st.DB.QueryRow(`PRAGMA busy_timeout`).Scan(&before); err != nil {
				t.Fatal(err)
			}
			if before != 15000 || e.x.CheckpointBusyTimeout.Milliseconds() == before {
				t.Fatalf("fixture: pool timeout %dms, checkpoint timeout %v", before, e.x.CheckpointBusyTimeout)
			}
			w, err := e.p.EnqueueWAL(ctx, mode)
			if err != nil {
				t.Fatal(err)
			}
			if did, err := e.x.RunWALOnce(ctx); !did || err != nil {
				t.Fatalf("did=%v err=%v", did, err)
			}
			var status string
			e.st.DB.QueryRow(`SELECT status FROM wal_maintenance_jobs WHERE id = ?`, w.ID).Scan(&status)
			if status != store.StatusCompleted {
				t.Fatalf("checkpoint %s", status)
			}
			var after int64
			if err := e.st.DB.QueryRow(`PRAGMA busy_timeout`).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if after != before {
				t.Fatalf("busy_timeout after the checkpoint %dms, want %dms", after, before)
			}
		})
	}
}
