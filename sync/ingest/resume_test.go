package ingest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// A resume id read from the operator API, which returns rows above the
// horizon: a transaction with a smaller xid was open when the client read
// it, commits after that read, and by the time of the resume the horizon
// has moved past both. Its rows must still come (the rows from the
// horizon of the id's insert on may come again, ids unchanged). On SQLite
// writers take turns: the resume is exact.
func TestTailResumeFromAPIReadBeforeOlderCommitSkipsNothing(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := startServer(t, db)
		st := NewStore(db)
		edge, _ := s.register("e")
		slow := events(edge, "slow", 1000, "queued", "running")
		fast := events(edge, "fast", 2000, "queued")
		commit := func() {}
		if db.Engine == sqldb.Postgres {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := st.insertEvents(ctx, tx, slow, time.Now()); err != nil { // takes the smaller xid
				t.Fatal(err)
			}
			commit = func() {
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
		} else if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: slow}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: fast}); err != nil {
			t.Fatal(err)
		}
		var page struct{ Events []EventView }
		if res := s.get("/v1/edges/"+edge+"/jobs/fast/events", &page); res.status != 200 || len(page.Events) != 1 {
			t.Fatalf("API: %d %s", res.status, res.body)
		}
		fastSeq := page.Events[0].Seq
		commit()
		// Another transaction commits: the horizon is past both.
		if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: events(edge, "later", 3000, "queued")}); err != nil {
			t.Fatal(err)
		}

		want := map[string]int{"slow": 2, "later": 1}
		if db.Engine != sqldb.Postgres {
			want = map[string]int{"later": 1} // commit order is seq order
		}
		check := func(how string, got map[string]int) {
			t.Helper()
			for job, n := range want {
				if got[job] != n {
					t.Errorf("%s after %d: %s sent %d times, want %d (%v)", how, fastSeq, job, got[job], n, got)
				}
			}
			if got["fast"] > 1 {
				t.Errorf("%s after %d: %v", how, fastSeq, got)
			}
		}

		start, err := st.TailStartAnySeq(ctx, fastSeq)
		if err != nil {
			t.Fatal(err)
		}
		// The tail hands out rows below the oldest transaction still open
		// on the whole server, and other tests share it: a transaction of
		// theirs can hold "later" back for a moment. Read until it came.
		var got map[string]int
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got = map[string]int{}
			for c := start; ; {
				rows, next, err := st.TailPage(ctx, c, 100)
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) == 0 {
					break
				}
				for _, e := range rows {
					got[e.JobID]++
				}
				c = next
			}
			if got["later"] > 0 || time.Now().After(deadline) {
				break
			}
		}
		check("TailStartAnySeq", got)

		// The fleet tail takes such a seq as ?last_event_id=.
		got = map[string]int{}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err = sseRead(tctx, s, "?last_event_id="+strconv.FormatInt(fastSeq, 10), "", func(_ string, e EventView) bool {
			got[e.JobID]++
			return e.JobID != "later"
		})
		if err != nil {
			t.Fatal(err)
		}
		check("?last_event_id=", got)
	})
}
