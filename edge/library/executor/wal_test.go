package executor_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

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

// TestBusyCheckpointFailsAfterRetryCeiling holds a read transaction open on
// another connection so TRUNCATE and RESTART checkpoints report busy: each
// attempt becomes retryable with backoff until MaxWALRetries attempts have
// been made, then the row is failed and never claimed again.
func TestBusyCheckpointFailsAfterRetryCeiling(t *testing.T) {
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
			for attempt := 1; attempt <= 3; attempt++ {
				if did, err := e.x.RunWALOnce(ctx); !did || err != nil {
					t.Fatalf("attempt %d: did=%v err=%v", attempt, did, err)
				}
				var status string
				var code, msg *string
				var retries int64
				var after, busy, fin *int64
				e.st.DB.QueryRow(`SELECT status, error_code, error_message, retry_count, retry_after, checkpoint_busy, finished_at
FROM wal_maintenance_jobs WHERE id = ?`, w.ID).Scan(&status, &code, &msg, &retries, &after, &busy, &fin)
				if deref(code) != executor.CodeCheckpointBusy || fin == nil || *fin != clock.Load() {
					t.Fatalf("attempt %d: code=%q finished=%v", attempt, deref(code), derefI(fin))
				}
				if attempt < 3 {
					if status != store.StatusRetryable || retries != int64(attempt) || busy == nil || *busy == 0 ||
						after == nil || *after < clock.Load() {
						t.Fatalf("attempt %d: %s retries=%d busy=%v after=%v", attempt, status, retries, derefI(busy), derefI(after))
					}
					// Not claimable before retry_after...
					if *after > clock.Load() {
						if did, _ := e.x.RunWALOnce(ctx); did {
							t.Fatalf("attempt %d: claimed before retry_after", attempt)
						}
					}
					// ...and claimable once it has passed.
					clock.Store(*after + 1)
					continue
				}
				if status != store.StatusFailed || !strings.Contains(deref(msg), "still busy after 3 attempts") {
					t.Fatalf("after the retry ceiling: %s %q", status, deref(msg))
				}
			}
			clock.Add(time.Hour.Milliseconds())
			if did, err := e.x.RunWALOnce(ctx); did || err != nil {
				t.Fatalf("failed checkpoint claimed again: did=%v err=%v", did, err)
			}

			// With the reader gone the same mode completes.
			rtx.Rollback()
			w2, _ := e.p.EnqueueWAL(ctx, mode)
			if did, err := e.x.RunWALOnce(ctx); !did || err != nil {
				t.Fatalf("did=%v err=%v", did, err)
			}
			var status string
			e.st.DB.QueryRow(`SELECT status FROM wal_maintenance_jobs WHERE id = ?`, w2.ID).Scan(&status)
			if status != store.StatusCompleted {
				t.Fatalf("checkpoint without readers: %s", status)
			}
		})
	}
}
