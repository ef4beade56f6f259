package ingest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// On Postgres a row with a smaller seq can commit after one with a larger
// seq. The tail must not send the larger one first (a client would resume
// past the smaller one and never see it): it waits for the horizon, then
// sends both. On SQLite writers take turns, so only the ordering is
// checked there.
func TestTailWaitsForOutOfOrderCommits(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		reg, _ := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
		edge := reg.EdgeID
		start, err := st.TailStart(ctx, -1)
		if err != nil {
			t.Fatal(err)
		}
		slow := events(edge, "slow", 1000, "queued")
		fast := events(edge, "fast", 2000, "queued")
		if db.Engine == sqldb.Postgres {
			// The slow transaction draws its seq first and stays open.
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := st.insertEvents(ctx, tx, slow, time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: fast}); err != nil {
				t.Fatal(err)
			}
			var fastSeq, visible int
			_ = db.QueryRow(`SELECT seq FROM edge_events WHERE job_id = 'fast'`).Scan(&fastSeq)
			if visible = count(t, db, `SELECT COUNT(*) FROM edge_events`); visible != 1 {
				t.Fatalf("%d rows visible", visible)
			}
			page, _, err := st.TailPage(ctx, start, 100)
			if err != nil || len(page) != 0 {
				t.Fatalf("tail sent %d rows past an open transaction holding a smaller seq (%v)", len(page), err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, b := range [][]wire.Event{slow, fast} {
				if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: b}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The tail stops at the horizon of every transaction open on the
		// server, another test's in another database too (xids are the
		// cluster's): it sends both rows once those end, as a client
		// polling it sees them.
		var page []EventView
		var next TailCursor
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			page, next, err = st.TailPage(ctx, start, 100)
			// Until both: a transaction another test opened between the
			// two may hold the horizon between them for a while.
			if err != nil || len(page) >= 2 || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || len(page) != 2 || page[0].JobID != "slow" || page[1].JobID != "fast" || page[0].Seq >= page[1].Seq {
			t.Fatalf("tail after commit: %+v %v", page, err)
		}
		// Resuming from the last id sent finds nothing more; from the first,
		// exactly the second.
		if more, _, _ := st.TailPage(ctx, next, 100); len(more) != 0 {
			t.Fatalf("%d rows after the end", len(more))
		}
		c, err := st.TailStart(ctx, page[0].Seq)
		if err != nil {
			t.Fatal(err)
		}
		if more, _, _ := st.TailPage(ctx, c, 100); len(more) != 1 || more[0].Seq != page[1].Seq {
			t.Fatalf("resume from %d: %+v", page[0].Seq, more)
		}
		// A resume id from before everything, and the current end.
		if c, _ := st.TailStart(ctx, 0); true {
			if all, _, _ := st.TailPage(ctx, c, 100); len(all) != 2 {
				t.Fatalf("from 0: %d", len(all))
			}
		}
		if c, _ := st.TailStart(ctx, -1); true {
			if none, _, _ := st.TailPage(ctx, c, 100); len(none) != 0 {
				t.Fatalf("from the end: %d", len(none))
			}
		}
	})
}

// sseClient reads one connection of the fleet tail, calling got for each
// event until got returns false.
func sseClient(ctx context.Context, s *server, lastID string, got func(id string, e EventView) bool) error {
	return sseRead(ctx, s, "", lastID, got)
}

// sseRead is sseClient with a query string (from "?") for the URL.
func sseRead(ctx context.Context, s *server, query, lastID string, got func(id string, e EventView) bool) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/v1/edges/events"+query, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return fmt.Errorf("tail: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var id string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			var e EventView
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e); err != nil {
				return err
			}
			if strconv.FormatInt(e.Seq, 10) != id {
				return fmt.Errorf("id %s for seq %d", id, e.Seq)
			}
			if !got(id, e) {
				return nil
			}
		}
	}
	return sc.Err()
}

// Under concurrent ingest by several goroutines into two processes, a
// client that keeps disconnecting and resuming with Last-Event-ID sees
// every event exactly once.
func TestTailResumesWithoutGapOrDuplicate(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		pods := []*server{startServer(t, db), startServer(t, openURL(t, url))}
		edge, secret := pods[0].register("jetson-1")
		const writers, batches, perBatch = 4, 15, 40
		total := writers * batches * perBatch
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		var mu sync.Mutex
		seen := map[string]int{}
		lastID := "0"
		received := 0
		readerDone := make(chan error, 1)
		go func() {
			conn := 0
			for received < total && ctx.Err() == nil {
				conn++
				// Each connection takes a few events, then drops.
				take := 7 + conn%13
				err := sseClient(ctx, pods[conn%2], lastID, func(id string, e EventView) bool {
					mu.Lock()
					seen[e.EventID]++
					mu.Unlock()
					lastID = id
					received++
					take--
					return take > 0 && received < total
				})
				if err != nil && ctx.Err() == nil {
					readerDone <- err
					return
				}
			}
			readerDone <- ctx.Err()
		}()

		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range batches {
					types := make([]string, perBatch)
					for i := range types {
						types[i] = "delta"
					}
					job := fmt.Sprintf("w%d-b%02d", w, b)
					u := sign(t, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: events(edge, job, 1700000000000, types...)}, secret, time.Now())
					if res := pods[(w+b)%2].send(u); res.status != 200 {
						t.Errorf("batch: %d %s", res.status, res.body)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := <-readerDone; err != nil {
			t.Fatalf("reader: %v (received %d of %d)", err, received, total)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != total {
			t.Fatalf("saw %d distinct events of %d", len(seen), total)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("event %s sent %d times", id, n)
			}
		}
	})
}

// An idle tail sends heartbeat comments, so proxies keep it open and a
// dead client is noticed by the next write.
func TestTailHeartbeats(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		s := startServer(t, db)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/v1/edges/events", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if sc.Text() == ": ping" {
				return
			}
		}
		t.Fatalf("no heartbeat before the stream ended: %v", sc.Err())
	})
}

// A tail opened with an operator token ends once the operator is
// disabled: nothing stored after that reaches it, and a heartbeat ends an
// idle one.
func TestTailEndsWhenOperatorDisabled(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		s := startServer(t, db)
		ops := operators.New(db)
		op, err := ops.Create(context.Background(), "on-call")
		if err != nil {
			t.Fatal(err)
		}
		edge, secret := s.register("jetson-1")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/v1/edges/events", nil)
		req.Header.Set("Authorization", "Bearer "+op.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("tail: %d", res.StatusCode)
		}
		send := func(job string) {
			u := sign(t, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: events(edge, job, time.Now().UnixMilli(), "delta")}, secret, time.Now())
			if r := s.send(u); r.status != http.StatusOK {
				t.Fatalf("batch: %d %s", r.status, r.body)
			}
		}
		lines := make(chan string, 64)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		send("while-enabled")
		for l := range lines {
			if strings.Contains(l, "while-enabled") {
				break
			}
		}
		if err := ops.Disable(context.Background(), op.OperatorID); err != nil {
			t.Fatal(err)
		}
		send("after-disable")
		for l := range lines {
			if strings.Contains(l, "after-disable") {
				t.Fatal("an event stored after the operator was disabled reached its tail")
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the tail did not end")
		}
	})
}

// A resume id whose row retention removed resumes at the next retained
// row, and never past a row of a transaction still open: on Postgres the
// next row by seq may have committed ahead of one with a smaller xid, and
// a cursor taken from it would skip that one for good once it commits.
func TestTailResumeFromPrunedRowSkipsNothing(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		reg, _ := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
		edge := reg.EdgeID
		if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: events(edge, "gone", 500, "queued")}); err != nil {
			t.Fatal(err)
		}
		var gone int64
		if err := db.QueryRow(`SELECT seq FROM edge_events WHERE job_id = 'gone'`).Scan(&gone); err != nil {
			t.Fatal(err)
		}
		// Retention removed the row the client last received.
		if _, err := db.Exec(`DELETE FROM edge_events WHERE job_id = 'gone'`); err != nil {
			t.Fatal(err)
		}
		start := slowBehindFast(t, st, db, edge, func() int64 { return gone })
		// Another transaction open on the cluster holds the horizon back
		// for a while; what the tail owes arrives once it has ended.
		got := map[string]int{}
		var page []EventView
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var err error
			if page, _, err = st.TailPage(ctx, start, 100); err != nil {
				t.Fatal(err)
			}
			if len(page) >= 2 || time.Now().After(deadline) {
				break
			}
		}
		for _, e := range page {
			got[e.JobID]++
		}
		if got["slow"] != 1 || got["fast"] != 1 || len(page) != 2 {
			t.Fatalf("resume after pruned seq %d: %v", gone, got)
		}
	})
}

// A resume id need not come from the tail: the operator API returns rows
// above the horizon. Resuming from such a row while a transaction with a
// smaller xid is still open must not skip that transaction's rows once it
// commits; the rows from the horizon on may come again, ids unchanged.
func TestTailResumeFromRowAboveHorizonSkipsNothing(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		reg, _ := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
		edge := reg.EdgeID
		var fastSeq int64
		// What a client reading the job's events through the API gets.
		start := slowBehindFast(t, st, db, edge, func() int64 {
			if err := db.QueryRow(`SELECT seq FROM edge_events WHERE job_id = 'fast'`).Scan(&fastSeq); err != nil {
				t.Fatal(err)
			}
			return fastSeq
		})
		var page []EventView
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var err error
			if page, _, err = st.TailPage(ctx, start, 100); err != nil {
				t.Fatal(err)
			}
			if len(page) >= 1 || time.Now().After(deadline) || db.Engine != sqldb.Postgres {
				break
			}
		}
		got := map[string]int{}
		for _, e := range page {
			got[e.JobID]++
		}
		if db.Engine != sqldb.Postgres {
			// Commit order is seq order: nothing can be behind the id.
			if len(page) != 0 {
				t.Fatalf("resume after %d on SQLite: %v", fastSeq, got)
			}
			return
		}
		if got["slow"] != 1 || got["fast"] > 1 {
			t.Fatalf("resume after %d (above the horizon): %v", fastSeq, got)
		}
	})
}

// slowBehindFast stores an event of job "slow" and then one of job "fast"
// in another batch, and returns the tail's cursor to resume after the seq
// resumeAt gives. On Postgres the slow batch's transaction (the smaller
// xid) stays open until the cursor is taken, so the fast one commits
// ahead of it.
func slowBehindFast(t *testing.T, st *Store, db *sqldb.DB, edge string, resumeAt func() int64) TailCursor {
	t.Helper()
	ctx := context.Background()
	slow := events(edge, "slow", 1000, "queued")
	fast := events(edge, "fast", 2000, "queued")
	ingest := func(b []wire.Event) {
		if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: b}); err != nil {
			t.Fatal(err)
		}
	}
	if db.Engine != sqldb.Postgres {
		ingest(slow)
		ingest(fast)
		start, err := st.TailStart(ctx, resumeAt())
		if err != nil {
			t.Fatal(err)
		}
		return start
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := st.insertEvents(ctx, tx, slow, time.Now()); err != nil {
		t.Fatal(err)
	}
	ingest(fast)
	start, err := st.TailStart(ctx, resumeAt())
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return start
}
