package edgedaily

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/objstore"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/sync/ingest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// dayEnd is the end of the day msg reports (2026-01-02).
var dayEnd = day.Add(24 * time.Hour)

// ship stores evs as central's ingest does when the edge's batch arrives,
// which also marks the edge as heard from.
func ship(t testing.TB, st *ingest.Store, edge string, evs []ev) {
	t.Helper()
	b := wire.Batch{EdgeID: edge, SentAt: time.Now().UTC()}
	for i, e := range evs {
		ts := day.Add(e.at).UnixMilli()
		w := wire.NewEvent(edge, e.job, fmt.Sprintf("%d-%d", ts, i), e.typ, e.step, ts, json.RawMessage(e.data))
		w.Task = e.task
		b.Events = append(b.Events, w)
	}
	if _, err := st.Ingest(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// heartbeat stores the edge's status as sent at sent with its spool's
// oldest event stamped oldest (zero: an empty spool).
func heartbeat(t testing.TB, st *ingest.Store, edge string, sent, oldest time.Time) {
	t.Helper()
	s := wire.Status{EdgeID: edge, SentAt: sent.UTC(), Version: "test"}
	if !oldest.IsZero() {
		s.Spool = wire.SpoolStatus{Events: 3, Bytes: 300, OldestTS: oldest.UnixMilli()}
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Heartbeat(context.Background(), s, raw); err != nil {
		t.Fatal(err)
	}
}

// The day is read only once the edge has delivered past its end: its
// newest event, or a heartbeat sent after the end whose spool holds
// nothing older. Until then the fetch fails UPSTREAM_INCOMPLETE, which the
// retry table retries; an edge central never heard from (or does not
// know) keeps UPSTREAM_EMPTY, as does a delivered day without events.
func TestFetchWaitsForTheEdgeToDeliverTheDay(t *testing.T) {
	early := []ev{
		{"a", "running", "worker.start", "chat", time.Hour, ""},
		{"a", "done", "worker.done", "chat", time.Hour + 2*time.Second, ""},
	}
	late := ev{"b", "running", "worker.start", "chat", 24*time.Hour + time.Minute, ""}
	after, before := dayEnd.Add(2*time.Hour), dayEnd.Add(-time.Minute)
	cases := []struct {
		name     string
		events   []ev
		seen     bool      // central heard from the edge (a heartbeat or a batch)
		sent     time.Time // heartbeat's sent_at; zero: none
		oldest   time.Time // heartbeat's oldest spooled event; zero: spool empty
		code     string
		wantJobs int
	}{
		{name: "events before the end, no heartbeat", events: early, code: pipeline.CodeUpstreamIncomplete},
		{name: "heartbeat after the end, spool holds the day", events: early, sent: after, oldest: dayEnd.Add(-2 * time.Hour), code: pipeline.CodeUpstreamIncomplete},
		{name: "heartbeat before the end, spool empty", events: early, sent: before, code: pipeline.CodeUpstreamIncomplete},
		{name: "heartbeat of a silent edge before the end", sent: before, code: pipeline.CodeUpstreamIncomplete},
		{name: "heartbeat after the end, spool empty", events: early, sent: after, wantJobs: 1},
		{name: "heartbeat after the end, spool holds later events", events: early, sent: after, oldest: dayEnd, wantJobs: 1},
		{name: "an event past the end arrived", events: append(append([]ev{}, early...), late), wantJobs: 1},
		{name: "delivered, nothing that day", events: []ev{late}, code: pipeline.CodeUpstreamEmpty},
		{name: "heard from, silent that day", sent: after, code: pipeline.CodeUpstreamEmpty},
		{name: "never heard from", code: pipeline.CodeUpstreamEmpty},
	}
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		st := ingest.NewStore(db)
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				edge := fmt.Sprintf("edge-%d", i)
				addEdge(t, db, edge)
				if len(tc.events) > 0 {
					ship(t, st, edge, tc.events)
				}
				if !tc.sent.IsZero() {
					heartbeat(t, st, edge, tc.sent, tc.oldest)
				}
				ev, err := Fetch(context.Background(), db, edge, "2026-01-02")
				if got := pipeline.ErrorCode(err); got != tc.code {
					t.Fatalf("Fetch: %v, want code %q", err, tc.code)
				}
				if tc.code == "" && len(ev.Jobs) != tc.wantJobs {
					t.Fatalf("%d jobs, want %d", len(ev.Jobs), tc.wantJobs)
				}
				if tc.code != "" && pipeline.Retry[tc.code] != (tc.code == pipeline.CodeUpstreamIncomplete) {
					t.Fatalf("%s: retried %v", tc.code, pipeline.Retry[tc.code])
				}
			})
		}
		_, err := Fetch(context.Background(), db, "no-such-edge", "2026-01-02")
		if pipeline.ErrorCode(err) != pipeline.CodeUpstreamEmpty {
			t.Fatalf("unknown edge: %v", err)
		}
	})
}

// Central (or the uplink) was down from 22:00 across the daily slot: the
// day's job runs while the edge still spools the rest of the day. It fails
// UPSTREAM_INCOMPLETE and goes back to the queue instead of storing a
// partial report that would stand for good; once the backlog arrives the
// retry reports the whole day. A job that spent its attempts meanwhile is
// dead-lettered, and redriven once the day is in, it reports it whole too.
func TestUndeliveredDayIsRetriedThenReportedWhole(t *testing.T) {
	before := []ev{
		{"j1", "running", "worker.start", "chat", time.Hour, ""},
		{"j1", "done", "worker.done", "chat", time.Hour + 3*time.Second, ""},
		{"j2", "running", "worker.start", "embed", 21 * time.Hour, ""},
		{"j2", "error", "worker.error", "embed", 21*time.Hour + time.Second, `{"code":"backend_timeout"}`},
	}
	spooled := []ev{ // captured after 22:00, shipped when the uplink is back
		{"j3", "running", "worker.start", "chat", 22*time.Hour + 30*time.Minute, ""},
		{"j3", "done", "worker.done", "chat", 23*time.Hour + 59*time.Minute, ""},
		{"j4", "running", "worker.start", "chat", 24*time.Hour + time.Hour, ""},
	}
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		in := ingest.NewStore(db)
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		dir := t.TempDir()
		cs := &countingStore{Store: objstore.Dir{Path: dir}}
		types := pipeline.NewRegistry()
		_ = types.Register(Type(db, cs))
		s := pipeline.NewStore(db, clock)
		s.Types = types
		s.Backoff = lease.Backoff{Base: time.Hour, Cap: time.Hour, Rand: func() float64 { return 1 }}
		for _, edge := range []string{"edge-1", "edge-2"} {
			addEdge(t, db, edge)
			ship(t, in, edge, before)
			heartbeat(t, in, edge, dayEnd.Add(2*time.Hour), day.Add(spooled[0].at))
		}
		c, err := s.Submit(ctx, pipeline.Request{JobType: Name, Symbol: "edge-1", Asof: "2026-01-02", RequestedBy: "scheduler"})
		if err != nil {
			t.Fatal(err)
		}
		s.MaxAttempts = 1
		dead, err := s.Submit(ctx, pipeline.Request{JobType: Name, Symbol: "edge-2", Asof: "2026-01-02", RequestedBy: "scheduler"})
		if err != nil {
			t.Fatal(err)
		}
		w := pipeline.NewWorker(s, types, pipeline.WorkerConfig{ID: "w", Visibility: 30 * time.Second, Concurrency: 2, Poll: 20 * time.Millisecond})
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(wctx) }()
		defer func() { cancel(); <-done }()

		ran := func(id string) bool {
			r, _ := s.GetByID(ctx, id)
			return r.Attempts >= 1 && r.Status != pipeline.StatusRunning
		}
		waitFor(t, func() bool { return ran(c.JobID) && ran(dead.JobID) })
		for id, want := range map[string]string{c.JobID: pipeline.StatusQueued, dead.JobID: pipeline.StatusDeadLetter} {
			r, _ := s.GetByID(ctx, id)
			if r.Status != want || r.LastError == nil || r.LastError.ErrorCode != pipeline.CodeUpstreamIncomplete {
				t.Fatalf("job %s after its first run: %s %+v, want %s UPSTREAM_INCOMPLETE", id, r.Status, r.LastError, want)
			}
		}
		if p, _ := cs.counts(); p != 0 {
			t.Fatalf("%d storage writes of an incomplete day", p)
		}

		for _, edge := range []string{"edge-1", "edge-2"} {
			ship(t, in, edge, spooled)
		}
		mu.Lock()
		now = now.Add(time.Hour + time.Second) // the retry's backoff is over
		mu.Unlock()
		if _, err := s.Redrive(ctx, dead.JobID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			r, _ := s.GetByID(ctx, c.JobID)
			d, _ := s.GetByID(ctx, dead.JobID)
			return r.Status == pipeline.StatusSucceeded && d.Status == pipeline.StatusSucceeded
		})
		if r, _ := s.GetByID(ctx, c.JobID); r.Attempts != 2 {
			t.Fatalf("succeeded at attempt %d, want the retry (2)", r.Attempts)
		}
		for _, edge := range []string{"edge-1", "edge-2"} {
			b, err := os.ReadFile(filepath.Join(dir, "edge_daily", edge, "2026-01-02.json"))
			if err != nil {
				t.Fatal(err)
			}
			var r Report
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.Events != 6 || r.Jobs != 3 || len(r.Tasks) != 2 || r.Tasks[0].Done != 2 {
				t.Fatalf("%s: report of %d events, %d jobs, tasks %+v; want the whole day (6, 3)", edge, r.Events, r.Jobs, r.Tasks)
			}
		}
	})
}

// A report of today (an operator's request) is the day so far: the day
// has not ended, so nothing past its end can have been delivered, and
// waiting for it would only dead-letter the job.
func TestFetchOfTodayReportsTheDaySoFar(t *testing.T) {
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		st := ingest.NewStore(db)
		edge := "edge-today"
		addEdge(t, db, edge)
		now, err := db.Clock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(now.Truncate(24*time.Hour)) < 2*time.Second {
			time.Sleep(3 * time.Second) // the event's second must be today's
			if now, err = db.Clock(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		ts := now.Add(-time.Second).UnixMilli()
		b := wire.Batch{EdgeID: edge, SentAt: time.Now().UTC(),
			Events: []wire.Event{wire.NewEvent(edge, "job-1", fmt.Sprintf("%d-0", ts), "running", "worker.start", ts, nil)}}
		if _, err := st.Ingest(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		ev, err := Fetch(context.Background(), db, edge, now.UTC().Format(pipeline.DateLayout))
		if err != nil {
			t.Fatalf("Fetch of today: %v", err)
		}
		if len(ev.Jobs) != 1 {
			t.Fatalf("%d jobs, want 1", len(ev.Jobs))
		}
	})
}
