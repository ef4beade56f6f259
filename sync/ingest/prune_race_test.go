package ingest

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// pruneDuring starts a prune of everything received before cutoff and
// returns a wait for its result (callable more than once). The prune runs
// in its own transactions, as another pod's would.
func pruneDuring(ctx context.Context, st *Store, cutoff time.Time) func(t *testing.T) Pruned {
	type result struct {
		p   Pruned
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := st.Prune(ctx, cutoff)
		done <- result{p, err}
	}()
	var r *result
	return func(t *testing.T) Pruned {
		t.Helper()
		if r == nil {
			got := <-done
			r = &got
		}
		if r.err != nil {
			t.Fatalf("prune: %v", r.err)
		}
		return r.p
	}
}

// waitBlocked returns once a statement starting with prefix waits for a
// row lock in db's database (Postgres), so a test interleaves two
// transactions at a known point rather than after a guessed sleep.
func waitBlocked(t *testing.T, db *sqldb.DB, prefix string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for count(t, db, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query LIKE ?`, prefix+"%") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %q waits for a lock", prefix)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// storedLongAgo registers an edge on st and stores, as received 40 days
// ago (past a 30-day retention), three events of job "job" and, when
// withGap, a gap of it. It returns the edge id, the batch and the gap.
func storedLongAgo(t *testing.T, st *Store, db *sqldb.DB, withGap bool) (string, wire.Batch, wire.Gap) {
	t.Helper()
	ctx := context.Background()
	reg, err := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	edge := reg.EdgeID
	old := time.Now().Add(-40 * 24 * time.Hour)
	gap := wire.Gap{GapID: wire.GapID(edge, "job", "1001-0"), JobID: "job", Type: "delta", Count: 3,
		FirstEntryID: "1001-0", LastEntryID: "1001-2", FirstTS: 1001, LastTS: 1001}
	batch := wire.Batch{EdgeID: edge, SentAt: old, Events: events(edge, "job", 1000, "queued", "running", "done")}
	wantGaps := 0
	if withGap {
		batch.Dropped, wantGaps = []wire.Gap{gap}, 1
	}
	st.now = func() time.Time { return old }
	if res, err := st.Ingest(ctx, batch); err != nil || res.Accepted != 3 || res.Gaps != wantGaps {
		t.Fatalf("first delivery: %+v %v", res, err)
	}
	st.now = time.Now
	return edge, batch, gap
}

// requireCounts checks each single-number query's answer.
func requireCounts(t *testing.T, db *sqldb.DB, want map[string]int) {
	t.Helper()
	for q, n := range want {
		if got := count(t, db, q); got != n {
			t.Fatalf("%s: %d, want %d", q, got, n)
		}
	}
}

// A resend of entries that a prune removes while the resend's batch is
// being stored: the batch read the job's retention mark before the prune
// wrote it, and inserts after the prune deleted the rows. The entries
// must not be stored again (a second copy in the tail, counted twice in
// events_total, the job summary re-created from them). On SQLite the
// prune waits for the batch's transaction (one writer at a time); on
// Postgres it commits in between.
func TestPruneDuringAResendStoresNothingAgain(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		_, batch, _ := storedLongAgo(t, st, db, true)

		var wait func(t *testing.T) Pruned
		st.hook = func(point string) {
			if point != "marks" || wait != nil {
				return
			}
			wait = pruneDuring(ctx, st, time.Now().Add(-30*24*time.Hour))
			if db.Engine == sqldb.Postgres {
				wait(t) // the prune commits between the mark check and the insert
			}
		}
		res, err := st.Ingest(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if wait == nil {
			t.Fatal("the hook did not run")
		}
		wait(t)
		// Stored before the prune (SQLite), the entries are duplicates;
		// pruned before they are stored (Postgres), they are told apart
		// as older than retention.
		want := wire.BatchResult{Duplicates: 3}
		if db.Engine == sqldb.Postgres {
			want.Pruned, want.PrunedGaps = 3, 1
		}
		if res != want {
			t.Fatalf("resend: %+v, want %+v", res, want)
		}
		requireCounts(t, db, map[string]int{
			`SELECT COUNT(*) FROM edge_events`: 0,
			`SELECT COUNT(*) FROM edge_gaps`:   0,
			`SELECT COUNT(*) FROM edge_jobs`:   0,
			`SELECT events_total FROM edges`:   3,
			`SELECT dropped_total FROM edges`:  3,
		})
	})
}

// The other order: the prune has deleted the entries (and written the
// mark) but not committed when the resend inserts them. On Postgres the
// insert waits for the prune's commit and then finds no row to conflict
// with; on SQLite the resend waits for the prune to end.
func TestResendDuringAPruneStoresNothingAgain(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		_, batch, _ := storedLongAgo(t, st, db, false)

		type result struct {
			res wire.BatchResult
			err error
		}
		var resent chan result
		st.hook = func(point string) {
			if point != "pruned" || resent != nil {
				return
			}
			resent = make(chan result, 1)
			go func() {
				res, err := NewStore(db).Ingest(ctx, batch)
				resent <- result{res, err}
			}()
			if db.Engine == sqldb.Postgres {
				waitBlocked(t, db, "INSERT INTO edge_events")
			}
		}
		if _, err := st.Prune(ctx, time.Now().Add(-30*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if resent == nil {
			t.Fatal("the hook did not run")
		}
		r := <-resent
		if want := (wire.BatchResult{Duplicates: 3, Pruned: 3}); r.err != nil || r.res != want {
			t.Fatalf("resend: %+v %v, want %+v", r.res, r.err, want)
		}
		requireCounts(t, db, map[string]int{
			`SELECT COUNT(*) FROM edge_events`: 0,
			`SELECT COUNT(*) FROM edge_jobs`:   0,
			`SELECT events_total FROM edges`:   3,
		})
	})
}

// A prune deletes what it selected as old, but a row it selected may be
// renewed by a concurrent transaction before the delete reaches it: a
// job summary touched by a batch of new events, a retention mark raised
// by another pod's prune. The renewed row must stay.
func TestPruneKeepsRowsRenewedMeanwhile(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		reg, _ := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
		edge := reg.EdgeID
		old := time.Now().Add(-40 * 24 * time.Hour)
		cutoff := time.Now().Add(-30 * 24 * time.Hour)

		t.Run("job summary", func(t *testing.T) {
			st.now = func() time.Time { return old }
			if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: old, Events: events(edge, "job", 1000, "queued", "running")}); err != nil {
				t.Fatal(err)
			}
			st.now = time.Now
			var wait func(t *testing.T) Pruned
			st.hook = func(point string) {
				if point != "stored" || wait != nil {
					return
				}
				wait = pruneDuring(ctx, st, cutoff)
				if db.Engine == sqldb.Postgres {
					waitBlocked(t, db, "DELETE FROM edge_jobs")
				}
			}
			defer func() { st.hook = nil }()
			if res, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: events(edge, "job", 5000, "done")}); err != nil || res.Accepted != 1 {
				t.Fatalf("new event: %+v %v", res, err)
			}
			wait(t)
			j, err := st.Job(ctx, edge, "job")
			if err != nil {
				t.Fatalf("the summary of a job that just got an event: %v", err)
			}
			if j.Status != StatusDone {
				t.Fatalf("status %s, want done", j.Status)
			}
		})

		t.Run("retention mark", func(t *testing.T) {
			mark := func(tx *sql.Tx, e entry, at time.Time) error {
				return st.raiseMarks(ctx, tx, map[jobKey]entry{{edge, "marked"}: e}, sqldb.Micros(at))
			}
			if err := db.Tx(ctx, func(tx *sql.Tx) error { return mark(tx, entry{1000, 0}, old) }); err != nil {
				t.Fatal(err)
			}
			var wait func(t *testing.T) Pruned
			err := db.Tx(ctx, func(tx *sql.Tx) error {
				if err := mark(tx, entry{2000, 0}, time.Now()); err != nil {
					return err
				}
				wait = pruneDuring(ctx, st, cutoff)
				if db.Engine == sqldb.Postgres {
					waitBlocked(t, db, "DELETE FROM edge_pruned_jobs")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wait(t)
			if n := count(t, db, `SELECT COUNT(*) FROM edge_pruned_jobs WHERE job_id = 'marked' AND entry_ms = 2000`); n != 1 {
				t.Fatal("the mark raised meanwhile was deleted")
			}
		})
	})
}

// A batch the edge quarantined was never stored. Resent by hand after
// retention pruned the rest of its job, its entries fall at or below the
// job's mark and are not stored; the answer still accounts for every
// event as accepted or duplicate (the shipper requires it), and says how
// many of them, and of the gaps, were older than retention, so the
// operator is not told they were stored.
func TestQuarantinedResendPastRetentionIsToldApart(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		srv := startServer(t, db)
		edge, secret := srv.register("e")
		ctx := context.Background()
		st := NewStore(db)
		old := time.Now().Add(-40 * 24 * time.Hour)
		st.now = func() time.Time { return old }
		if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: old, Events: events(edge, "job", 1000, "queued", "running", "done")}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Prune(ctx, time.Now().Add(-30*24*time.Hour)); err != nil {
			t.Fatal(err)
		}

		quarantined := events(edge, "job", 1001, "delta")
		quarantined[0] = wire.NewEvent(edge, "job", "1001-5", "delta", "s", 1001, json.RawMessage(`{}`))
		gap := wire.Gap{GapID: wire.GapID(edge, "job", "1001-1"), JobID: "job", Type: "delta", Count: 2,
			FirstEntryID: "1001-1", LastEntryID: "1001-2", FirstTS: 1001, LastTS: 1001}
		later := events(edge, "other", 1000, "queued")
		for _, tc := range []struct {
			name string
			b    wire.Batch
			want string
		}{
			{"older than retention", wire.Batch{Events: quarantined, Dropped: []wire.Gap{gap}},
				`{"accepted":0,"duplicates":1,"gaps":0,"pruned":1,"pruned_gaps":1}`},
			{"with an event stored", wire.Batch{Events: append(later, quarantined...)},
				`{"accepted":1,"duplicates":1,"gaps":0,"pruned":1}`},
			{"nothing older than retention", wire.Batch{Events: later}, `{"accepted":0,"duplicates":1,"gaps":0}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.b.EdgeID, tc.b.SentAt = edge, time.Now()
				res := srv.send(sign(t, tc.b, secret, time.Now()))
				if res.status != http.StatusOK || strings.TrimSpace(string(res.body)) != tc.want {
					t.Fatalf("answered %d %s, want 200 %s", res.status, res.body, tc.want)
				}
			})
		}
		if n := count(t, db, `SELECT COUNT(*) FROM edge_events WHERE job_id = 'job'`); n != 0 {
			t.Fatalf("%d events stored under the mark", n)
		}
		if logs := srv.logs.String(); strings.Count(logs, "sync batch entries older than retention not stored") != 2 {
			t.Fatalf("not logged once per batch with entries older than retention: %s", logs)
		}
	})
}
