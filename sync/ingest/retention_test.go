package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// An edge resends what central already stored (a batch whose answer was
// lost, a move repeated after a crash). Once retention has removed the
// rows, the event ids are no longer there to dedupe against: the resend
// must still not store them again, re-create the job or count them twice.
// It is answered as duplicates, so the edge deletes its copy, counted as
// pruned too; later entries of the job and other jobs are stored as usual.
func TestRetentionIsNotUndoneByAResend(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		edge, batch, gap := storedLongAgo(t, st, db, true)
		cutoff := time.Now().Add(-30 * 24 * time.Hour)
		if p, err := st.Prune(ctx, cutoff); err != nil || p != (Pruned{Events: 3, Gaps: 1, Jobs: 1}) {
			t.Fatalf("prune: %+v %v", p, err)
		}

		for _, tc := range []struct {
			name string
			b    wire.Batch
			want wire.BatchResult
		}{
			{"the whole batch again", batch, wire.BatchResult{Duplicates: 3, Pruned: 3, PrunedGaps: 1}},
			{"the gap alone", wire.Batch{EdgeID: edge, SentAt: time.Now(), Dropped: []wire.Gap{gap}}, wire.BatchResult{PrunedGaps: 1}},
			{"one event", wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: batch.Events[1:2]}, wire.BatchResult{Duplicates: 1, Pruned: 1}},
		} {
			res, err := st.Ingest(ctx, tc.b)
			if err != nil || res != tc.want {
				t.Fatalf("%s: %+v %v, want %+v", tc.name, res, err, tc.want)
			}
		}
		requireCounts(t, db, map[string]int{
			`SELECT COUNT(*) FROM edge_events`: 0,
			`SELECT COUNT(*) FROM edge_gaps`:   0,
			`SELECT COUNT(*) FROM edge_jobs`:   0,
			`SELECT events_total FROM edges`:   3,
			`SELECT dropped_total FROM edges`:  3,
		})

		// What retention never saw is stored: a later entry of the job,
		// another job.
		later := events(edge, "job", 2000, "delta")
		later = append(later, events(edge, "other", 1000, "queued")...)
		st.now = func() time.Time { return time.Now().Add(time.Hour) } // kept by the next prune
		if res, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: later}); err != nil || res.Accepted != 2 {
			t.Fatalf("new events: %+v %v", res, err)
		}
		st.now = time.Now

		// The memory of what was pruned lasts one more retention period.
		if _, err := st.Prune(ctx, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if res, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: batch.Events[:1]}); err != nil || res.Accepted != 1 {
			t.Fatalf("a resend after the memory of the prune went: %+v %v", res, err)
		}
	})
}
