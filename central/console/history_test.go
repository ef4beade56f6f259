package console

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// The finished-jobs chart counts every job once: one whose transaction
// committed after a job stamped later was read, and each of a run of
// equal stamps that a page of the query cut in two; reading again counts
// nothing twice, and a job redriven after it finished counts again when it
// finishes again.
func TestFinishedCountsEveryJobOnce(t *testing.T) {
	defer func(n int) { finishedPage = n }(finishedPage)
	finishedPage = 3
	start := time.UnixMicro(1_700_000_000_000_000)
	at := func(d time.Duration) int64 { return sqldb.Micros(start.Add(d)) }
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		exec := func(q string, args ...any) {
			t.Helper()
			if _, err := db.ExecContext(ctx, db.Rebind(q), args...); err != nil {
				t.Fatal(err)
			}
		}
		exec(`INSERT INTO requesters (id, name, api_key_hash, webhook_secret_encrypted, webhook_secret_dek_wrapped,
			webhook_secret_kek_id, webhook_secret_encryption_version, created_at, updated_at)
			VALUES ('req-1', 'r', 'hash-1', ?, ?, 'kek-1', 1, ?, ?)`, []byte{1}, []byte{2}, at(0), at(0))
		finish := func(id string, fin int64) {
			t.Helper()
			exec(`INSERT INTO inbox_jobs (id, requester_id, status, scheduled_at, next_attempt_at,
				output_bucket, output_prefix, renditions, created_at, updated_at, started_at, finished_at)
				VALUES (?, 'req-1', 'succeeded', ?, ?, 'out', 'o/', '[]', ?, ?, ?, ?)
				ON CONFLICT (id) DO UPDATE SET started_at = excluded.started_at, finished_at = excluded.finished_at`,
				id, at(0), at(0), at(0), at(0), fin-int64(time.Second/time.Microsecond), fin)
		}
		f := newFinished(db, start)
		read := func(t *testing.T, want float64) {
			t.Helper()
			f.last = time.Time{} // each read queries, however soon after the last
			got, err := f.total(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("counted %v jobs, want %v", got, want)
			}
		}

		finish("before-start", at(-time.Second))
		finish("a", at(10*time.Second))
		read(t, 1)
		// Stamped before "a", committed after it was read.
		finish("late", at(9*time.Second))
		read(t, 2)
		// Five jobs of one batch, one stamp: more than a page.
		for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
			finish(id, at(20*time.Second))
		}
		read(t, 7)
		read(t, 7)
		// Redriven, "a" finishes again.
		finish("a", at(30*time.Second))
		read(t, 8)
		// Further behind than the lag, a commit is no longer looked for;
		// nor is what was counted kept.
		finish("c", at(30*time.Second+2*finishedLag))
		read(t, 9)
		if len(f.seen) != 1 {
			t.Fatalf("%d jobs kept as counted, want 1: %v", len(f.seen), f.seen)
		}
		buckets, err := f.buckets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if b := buckets[0]; b.LE != 1 || b.Value != 9 {
			t.Fatalf("first bucket %+v, want 9 jobs of ≤1s", b)
		}
	})
}
