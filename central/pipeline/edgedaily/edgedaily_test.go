package edgedaily

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/objstore"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

var sets = []sqldb.Migrations{ingest.Migrations(), pipeline.Migrations()}

var day = time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)

func addEdge(t testing.TB, db *sqldb.DB, id string) {
	t.Helper()
	now := sqldb.Micros(time.Now())
	_, err := db.ExecContext(context.Background(), db.Rebind(`INSERT INTO edges (id, name, secret_encrypted, secret_dek_wrapped, secret_kek_id,
		secret_encryption_version, created_at, updated_at) VALUES (?, ?, ?, ?, 'k', 1, ?, ?)`), id, id, []byte{1}, []byte{1}, now, now)
	if err != nil {
		t.Fatal(err)
	}
}

// events inserts rows as the sync ingest stores them; each job is
// (task, [type@offset-ms...]).
type ev struct {
	job, typ, step, task string
	at                   time.Duration // from the day's start
	data                 string
}

func addEvents(t testing.TB, db *sqldb.DB, edge string, evs []ev) {
	t.Helper()
	ctx := context.Background()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for i, e := range evs {
			ts := day.Add(e.at).UnixMilli()
			data := e.data
			if data == "" {
				data = "{}"
			}
			var task any
			if e.task != "" {
				task = e.task
			}
			if _, err := db.ExecTx(ctx, tx, `INSERT INTO edge_events (event_id, edge_id, job_id, entry_id, entry_ms, entry_seq, type, step, task, ts, data, received_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				fmt.Sprintf("%s:%s:%d", edge, e.job, i), edge, e.job, fmt.Sprintf("%d-%d", ts, i), ts, i, e.typ, e.step, task, ts, data, sqldb.Micros(time.Now())); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sample() []ev {
	return []ev{
		{"j1", "queued", "gateway.enqueue", "chat", time.Hour, ""},
		{"j1", "running", "worker.start", "chat", time.Hour + time.Second, ""},
		{"j1", "done", "worker.done", "chat", time.Hour + 3*time.Second, ""},
		{"j2", "running", "worker.start", "chat", 2 * time.Hour, ""},
		{"j2", "error", "worker.error", "chat", 2*time.Hour + 5*time.Second, `{"code":"backend_timeout","message":"x"}`},
		{"j3", "running", "worker.start", "embed", 3 * time.Hour, ""},
		{"j3", "error", stepDead, "embed", 3*time.Hour + time.Second, `{"code":"max_deliveries_exceeded"}`},
		{"j4", "queued", "gateway.enqueue", "embed", 4 * time.Hour, ""},
		{"j4", "canceled", "gateway.cancel", "embed", 4*time.Hour + time.Second, ""},
		{"j5", "running", "worker.start", "chat", 23 * time.Hour, ""},
		// j6 started the day before and ended today.
		{"j6", "running", "worker.start", "chat", -time.Minute, ""},
		{"j6", "done", "worker.done", "chat", 9 * time.Second, ""},
		// j7 is tomorrow's.
		{"j7", "running", "worker.start", "chat", 25 * time.Hour, ""},
	}
}

// countingStore counts the writes that reach storage.
type countingStore struct {
	objstore.Store
	mu     sync.Mutex
	puts   int
	writes int
}

func (c *countingStore) Put(ctx context.Context, key string, body []byte, ct string) (string, bool, error) {
	ref, w, err := c.Store.Put(ctx, key, body, ct)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.puts++
	if w {
		c.writes++
	}
	return ref, w, err
}

func (c *countingStore) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts, c.writes
}

func msg(edge string) pipeline.JobMessage {
	return pipeline.JobMessage{JobID: "j", JobType: Name, Symbol: edge, Asof: "2026-01-02", RequestedBy: "t", Attempt: 1}
}

func TestReport(t *testing.T) {
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		addEdge(t, db, "edge-1")
		addEvents(t, db, "edge-1", sample())
		dir := t.TempDir()
		cs := &countingStore{Store: objstore.Dir{Path: dir}}
		typ := Type(db, cs)
		ref, err := typ.Runner.Run(context.Background(), msg("edge-1"))
		if err != nil {
			t.Fatal(err)
		}
		if ref != "file://"+filepath.Join(dir, "edge_daily/edge-1/2026-01-02.json") {
			t.Fatalf("ref %s", ref)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "edge_daily/edge-1/2026-01-02.json"))
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Events != 11 || r.Jobs != 6 {
			t.Fatalf("events %d jobs %d", r.Events, r.Jobs)
		}
		want := []TaskStats{
			{Task: "chat", Jobs: 4, Done: 2, Error: 1, Unfinished: 1, Duration: Durations{Count: 3, P50: 5000, P95: 69000}},
			{Task: "embed", Jobs: 2, Error: 1, Canceled: 1, DeadLetters: 1, Duration: Durations{Count: 1, P50: 1000, P95: 1000}},
		}
		if fmt.Sprint(r.Tasks) != fmt.Sprint(want) {
			t.Fatalf("tasks\n%+v\nwant\n%+v", r.Tasks, want)
		}
		if r.ErrorCodes["backend_timeout"] != 1 || r.ErrorCodes["max_deliveries_exceeded"] != 1 || len(r.DeadLetters) != 1 || r.DeadLetters[0] != "j3" {
			t.Fatalf("errors %v dead %v", r.ErrorCodes, r.DeadLetters)
		}
		c, _ := os.ReadFile(filepath.Join(dir, "edge_daily/edge-1/2026-01-02.csv"))
		if !strings.HasPrefix(string(c), "edge_id,asof,task,jobs,") || !strings.Contains(string(c), "edge-1,2026-01-02,chat,4,2,1,0,0,1,3,5000,69000") {
			t.Fatalf("csv:\n%s", c)
		}
		// §7 "Repeat job": re-executed, storage stays as it was.
		if _, w := cs.counts(); w != 2 {
			t.Fatalf("first run wrote %d objects", w)
		}
		st1, _ := os.Stat(filepath.Join(dir, "edge_daily/edge-1/2026-01-02.json"))
		if ref2, err := typ.Runner.Run(context.Background(), msg("edge-1")); err != nil || ref2 != ref {
			t.Fatalf("re-run: %s %v", ref2, err)
		}
		if p, w := cs.counts(); p != 4 || w != 2 {
			t.Fatalf("re-run: %d puts, %d writes; want nothing new written", p, w)
		}
		st2, _ := os.Stat(filepath.Join(dir, "edge_daily/edge-1/2026-01-02.json"))
		if !os.SameFile(st1, st2) || !st1.ModTime().Equal(st2.ModTime()) {
			t.Fatal("report file replaced by an unchanged re-run")
		}
	})
}

// The quality stage refuses only events that contradict the edge's job
// state machine; a job dead-lettered before it ran (queued -> error) and an
// edge clock stepped back during a job are sound events, so the day's
// report is produced: QUALITY_FAILED is final and would leave that edge
// without the day's report for good.
func TestReportQuality(t *testing.T) {
	deadData := `{"code":"max_deliveries_exceeded","message":"queue message 1-0 was delivered 5 times; the limit is 5","deliveries":5}`
	cases := []struct {
		name   string
		events []ev
		// wantErr is a substring of the QUALITY_FAILED message; empty: the
		// report is stored and is as the want fields say.
		wantErr    string
		wantTasks  []TaskStats
		wantDead   []string
		wantClock  []string
		wantErrors map[string]int
	}{{
		name: "dead letter before running",
		events: []ev{
			{"a", "running", "worker.start", "chat", time.Hour, ""},
			{"a", "done", "worker.done", "chat", time.Hour + 2*time.Second, ""},
			{"b", "queued", "gateway.enqueue", "chat", 2 * time.Hour, ""},
			{"b", "error", stepDead, "chat", 3 * time.Hour, deadData},
		},
		wantTasks:  []TaskStats{{Task: "chat", Jobs: 2, Done: 1, Error: 1, DeadLetters: 1, Duration: Durations{Count: 1, P50: 2000, P95: 2000}}},
		wantDead:   []string{"b"},
		wantClock:  []string{},
		wantErrors: map[string]int{"max_deliveries_exceeded": 1},
	}, {
		name: "dead letter before running known by its code",
		events: []ev{
			{"b", "queued", "gateway.enqueue", "embed", 2 * time.Hour, ""},
			{"b", "error", "worker.error", "embed", 3 * time.Hour, `{"code":"max_deliveries_exceeded"}`},
		},
		wantTasks:  []TaskStats{{Task: "embed", Jobs: 1, Error: 1, DeadLetters: 1}},
		wantDead:   []string{"b"},
		wantClock:  []string{},
		wantErrors: map[string]int{"max_deliveries_exceeded": 1},
	}, {
		name: "dead letter before running known by its step",
		events: []ev{
			{"b", "error", stepDead, "embed", 3 * time.Hour, ""},
		},
		wantTasks:  []TaskStats{{Task: "embed", Jobs: 1, Error: 1, DeadLetters: 1}},
		wantDead:   []string{"b"},
		wantClock:  []string{},
		wantErrors: map[string]int{"unknown": 1},
	}, {
		name: "cancelled while queued",
		events: []ev{
			{"c", "queued", "gateway.enqueue", "chat", time.Hour, ""},
			{"c", "canceled", "gateway.cancel", "chat", time.Hour + time.Second, ""},
		},
		wantTasks:  []TaskStats{{Task: "chat", Jobs: 1, Canceled: 1}},
		wantDead:   []string{},
		wantClock:  []string{},
		wantErrors: map[string]int{},
	}, {
		name: "clock stepped back",
		events: []ev{
			{"a", "running", "worker.start", "chat", time.Hour, ""},
			{"a", "done", "worker.done", "chat", time.Hour + 4*time.Second, ""},
			{"b", "running", "worker.start", "chat", 2 * time.Hour, ""},
			{"b", "done", "worker.done", "chat", 2*time.Hour - time.Second, ""},
		},
		wantTasks:  []TaskStats{{Task: "chat", Jobs: 2, Done: 2, ClockSteppedBack: 1, Duration: Durations{Count: 1, P50: 4000, P95: 4000}}},
		wantDead:   []string{},
		wantClock:  []string{"b"},
		wantErrors: map[string]int{},
	}, {
		name: "clock stepped back across midnight",
		events: []ev{
			{"b", "running", "worker.start", "chat", 24*time.Hour + time.Second, ""}, // stamped tomorrow
			{"b", "error", "worker.error", "chat", 24*time.Hour - time.Second, `{"code":"backend_timeout"}`},
		},
		wantTasks:  []TaskStats{{Task: "chat", Jobs: 1, Error: 1, ClockSteppedBack: 1}},
		wantDead:   []string{},
		wantClock:  []string{"b"},
		wantErrors: map[string]int{"backend_timeout": 1},
	}, {
		name: "done without a running event",
		events: []ev{
			{"a", "queued", "gateway.enqueue", "chat", time.Hour, ""},
			{"a", "done", "worker.done", "chat", 2 * time.Hour, ""},
		},
		wantErr: "job a: terminal event done without a running event",
	}, {
		name: "error without a running event that is no dead letter",
		events: []ev{
			{"a", "error", "worker.error", "chat", 2 * time.Hour, `{"code":"backend_timeout"}`},
		},
		wantErr: "job a: terminal event error without a running event",
	}, {
		name: "two terminal events",
		events: []ev{
			{"a", "running", "worker.start", "chat", time.Hour, ""},
			{"a", "done", "worker.done", "chat", 2 * time.Hour, ""},
			{"a", "error", stepDead, "chat", 3 * time.Hour, deadData},
		},
		wantErr: "job a has 2 terminal events",
	}}
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				edge := fmt.Sprintf("edge-%d", i)
				addEdge(t, db, edge)
				addEvents(t, db, edge, tc.events)
				dir := t.TempDir()
				cs := &countingStore{Store: objstore.Dir{Path: dir}}
				_, err := Type(db, cs).Runner.Run(context.Background(), msg(edge))
				if tc.wantErr != "" {
					if pipeline.ErrorCode(err) != pipeline.CodeQualityFailed || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("got %v, want QUALITY_FAILED %q", err, tc.wantErr)
					}
					if p, _ := cs.counts(); p != 0 {
						t.Fatalf("%d storage writes after a failed quality check", p)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(filepath.Join(dir, "edge_daily", edge, "2026-01-02.json"))
				if err != nil {
					t.Fatal(err)
				}
				var r Report
				if err := json.Unmarshal(b, &r); err != nil {
					t.Fatal(err)
				}
				if fmt.Sprint(r.Tasks) != fmt.Sprint(tc.wantTasks) {
					t.Fatalf("tasks\n%+v\nwant\n%+v", r.Tasks, tc.wantTasks)
				}
				if fmt.Sprint(r.DeadLetters) != fmt.Sprint(tc.wantDead) || fmt.Sprint(r.ClockSteppedBack) != fmt.Sprint(tc.wantClock) ||
					fmt.Sprint(r.ErrorCodes) != fmt.Sprint(tc.wantErrors) {
					t.Fatalf("dead letters %v clock stepped back %v error codes %v", r.DeadLetters, r.ClockSteppedBack, r.ErrorCodes)
				}
				if !strings.Contains(string(b), `"clock_stepped_back": [`) {
					t.Fatalf("report lists no clock_stepped_back:\n%s", b)
				}
				c, _ := os.ReadFile(filepath.Join(dir, "edge_daily", edge, "2026-01-02.csv"))
				lines := strings.Split(strings.TrimSpace(string(c)), "\n")
				if len(lines) != 2 || !strings.HasSuffix(lines[0], ",clock_stepped_back") ||
					!strings.HasSuffix(lines[1], fmt.Sprintf(",%d", tc.wantTasks[0].ClockSteppedBack)) {
					t.Fatalf("csv:\n%s", c)
				}
			})
		}
	})
}

func TestEmptyAndInvalid(t *testing.T) {
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		addEdge(t, db, "edge-empty")
		addEvents(t, db, "edge-empty", []ev{{"x", "running", "", "chat", 30 * time.Hour, ""}}) // not that day
		cs := &countingStore{Store: objstore.Dir{Path: t.TempDir()}}
		typ := Type(db, cs)
		_, err := typ.Runner.Run(context.Background(), msg("edge-empty"))
		if pipeline.ErrorCode(err) != pipeline.CodeUpstreamEmpty {
			t.Fatalf("empty: %v", err)
		}
		_, err = typ.Runner.Run(context.Background(), msg("no-such-edge"))
		if pipeline.ErrorCode(err) != pipeline.CodeUpstreamEmpty {
			t.Fatalf("unknown edge: %v", err)
		}
		if p, _ := cs.counts(); p != 0 {
			t.Fatalf("%d storage writes after failed runs", p)
		}
		if err := typ.Validate(pipeline.JobMessage{Symbol: "../etc"}); err == nil {
			t.Fatal("unsafe edge id accepted")
		}
	})
}

// §7 "Empty upstream" and "Repeat job" through the queue and a worker on
// both engines: failed UPSTREAM_EMPTY with no storage write; a job whose
// message is delivered again (at-least-once) rewrites nothing.
func TestEdgeDailyThroughQueue(t *testing.T) {
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		addEdge(t, db, "edge-1")
		addEvents(t, db, "edge-1", sample())
		cs := &countingStore{Store: objstore.Dir{Path: t.TempDir()}}
		types := pipeline.NewRegistry()
		_ = types.Register(Type(db, cs))
		s := pipeline.NewStore(db, nil)
		s.Types = types
		ok, err := s.Submit(ctx, pipeline.Request{JobType: Name, Symbol: "edge-1", Asof: "2026-01-02", RequestedBy: "t"})
		if err != nil {
			t.Fatal(err)
		}
		empty, _ := s.Submit(ctx, pipeline.Request{JobType: Name, Symbol: "edge-1", Asof: "2026-01-05", RequestedBy: "t"})
		w := pipeline.NewWorker(s, types, pipeline.WorkerConfig{ID: "w", Visibility: 5 * time.Second, Concurrency: 2, Poll: 20 * time.Millisecond})
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(wctx) }()
		waitFor(t, func() bool {
			a, _ := s.GetByID(ctx, ok.JobID)
			b, _ := s.GetByID(ctx, empty.JobID)
			return a.Status == pipeline.StatusSucceeded && b.Status == pipeline.StatusFailed
		})
		cancel()
		<-done
		a, _ := s.GetByID(ctx, ok.JobID)
		b, _ := s.GetByID(ctx, empty.JobID)
		if !strings.HasSuffix(a.ResultRef, "edge_daily/edge-1/2026-01-02.json") || b.LastError.ErrorCode != pipeline.CodeUpstreamEmpty {
			t.Fatalf("%+v / %+v", a, b.LastError)
		}
		if p, w := cs.counts(); p != 2 || w != 2 {
			t.Fatalf("%d puts %d writes", p, w)
		}
	})
}

func TestEdgeDailyS3(t *testing.T) {
	b := testsvc.S3(t)
	db := sqltest.Open(t, sqldb.SQLite, sets...)
	addEdge(t, db, "edge-1")
	addEvents(t, db, "edge-1", sample())
	s3, err := objstore.NewS3("s3://"+b.Name+"/pipe?endpoint="+b.Endpoint, objstore.Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{Store: s3}
	typ := Type(db, cs)
	for i := 0; i < 2; i++ {
		ref, err := typ.Runner.Run(context.Background(), msg("edge-1"))
		if err != nil || ref != "s3://"+b.Name+"/pipe/edge_daily/edge-1/2026-01-02.json" {
			t.Fatalf("%s %v", ref, err)
		}
	}
	if p, w := cs.counts(); p != 4 || w != 2 {
		t.Fatalf("%d puts %d writes", p, w)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// §7 "Repeat job" through the queue: a worker stores the report and dies
// before recording success; the message reappears (at-least-once), the job
// runs again and succeeds at attempt 2, and storage is written once.
func TestRepeatAfterCrashWritesNothingNew(t *testing.T) {
	sqltest.Each(t, sets, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		addEdge(t, db, "edge-1")
		addEvents(t, db, "edge-1", sample())
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		cs := &countingStore{Store: objstore.Dir{Path: t.TempDir()}}
		types := pipeline.NewRegistry()
		typ := Type(db, cs)
		_ = types.Register(typ)
		s := pipeline.NewStore(db, clock)
		s.Types = types
		c, err := s.Submit(ctx, pipeline.Request{JobType: Name, Symbol: "edge-1", Asof: "2026-01-02", RequestedBy: "t"})
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := s.Claim(ctx, "doomed", 1, 30*time.Second)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim %v %d", err, len(jobs))
		}
		if _, err := typ.Runner.Run(ctx, jobs[0].Msg); err != nil { // stored…
			t.Fatal(err)
		}
		// …and died: no success recorded, no heartbeat. 31 s later:
		mu.Lock()
		now = now.Add(31 * time.Second)
		mu.Unlock()
		w := pipeline.NewWorker(s, types, pipeline.WorkerConfig{ID: "survivor", Visibility: 30 * time.Second, Concurrency: 1, Poll: 20 * time.Millisecond})
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(wctx) }()
		waitFor(t, func() bool { r, _ := s.GetByID(ctx, c.JobID); return r.Status == pipeline.StatusSucceeded })
		cancel()
		<-done
		r, _ := s.GetByID(ctx, c.JobID)
		if r.Attempts != 2 || r.LastError == nil || r.LastError.ErrorCode != pipeline.CodeVisibilityTimeout {
			t.Fatalf("%+v %+v", r, r.LastError)
		}
		if p, w := cs.counts(); p != 4 || w != 2 {
			t.Fatalf("%d puts, %d writes; want the second run to write nothing", p, w)
		}
	})
}
