package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"database/sql"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func TestMakeIdempotencyKey(t *testing.T) {
	a := MakeIdempotencyKey("noop", "AAPL", "2026-01-02")
	if a != MakeIdempotencyKey("noop", "AAPL", "2026-01-02") {
		t.Fatal("not deterministic")
	}
	for _, other := range [][3]string{{"noop", "AAPL", "2026-01-03"}, {"noop", "MSFT", "2026-01-02"}, {"fx", "AAPL", "2026-01-02"}, {"prices\x00AAPL", "", "2026-01-02"}} {
		if MakeIdempotencyKey(other[0], other[1], other[2]) == a {
			t.Fatalf("%q collides", other)
		}
	}
	if len(a) != len("pk1:")+64 {
		t.Fatalf("key %q", a)
	}
}

func TestMessageValidate(t *testing.T) {
	ok := JobMessage{JobType: "noop", Symbol: "AAPL", Asof: "2026-01-02", RequestedBy: "op"}
	long := ok
	long.Symbol = string(make([]byte, MaxMessageBytes))
	for i := range []byte(long.Symbol) {
		_ = i
	}
	big := ok
	big.Symbol = fmt.Sprintf("%0*d", MaxMessageBytes, 1)
	cases := []struct {
		name string
		m    func() JobMessage
		code string
	}{
		{"valid", func() JobMessage { return ok }, ""},
		{"bad type", func() JobMessage { m := ok; m.JobType = "Prices!"; return m }, CodeInvalidMessage},
		{"empty symbol", func() JobMessage { m := ok; m.Symbol = ""; return m }, CodeInvalidMessage},
		{"control char", func() JobMessage { m := ok; m.Symbol = "a\nb"; return m }, CodeInvalidMessage},
		{"bad date", func() JobMessage { m := ok; m.Asof = "2026-13-01"; return m }, CodeInvalidMessage},
		{"datetime", func() JobMessage { m := ok; m.Asof = "2026-01-02T00:00:00Z"; return m }, CodeInvalidMessage},
		{"wrong key", func() JobMessage { m := ok; m.IdempotencyKey = "pk1:00"; return m }, CodeInvalidMessage},
		{"too large", func() JobMessage { return big }, CodeMessageTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ErrorCode(c.m().Validate()); got != c.code {
				t.Fatalf("code %q, want %q", got, c.code)
			}
		})
	}
}

// §7 "Idempotent triple submit".
func TestIdempotentTripleSubmit(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db, nil)
		f.store.Metrics = NewMetrics(prometheus.NewRegistry(), f.store)
		first := f.submit(t, "noop", "AAPL", "2026-01-02")
		if !first.Created || first.Status != StatusQueued {
			t.Fatalf("first: %+v", first)
		}
		for i := 0; i < 2; i++ {
			again := f.submit(t, "noop", "AAPL", "2026-01-02")
			if again.Created || again.JobID != first.JobID {
				t.Fatalf("submit %d: %+v, want existing %s", i+2, again, first.JobID)
			}
		}
		if n := counterValue(t, f.store.Metrics.Conflicts.WithLabelValues("noop")); n != 2 {
			t.Fatalf("idempotency conflicts %v, want 2", n)
		}
		if id, ok, err := f.store.GetByIdempotency(context.Background(), MakeIdempotencyKey("noop", "AAPL", "2026-01-02")); err != nil || !ok || id != first.JobID {
			t.Fatalf("get_by_idempotency: %s %v %v", id, ok, err)
		}
		var n int
		_ = db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM pipeline_jobs").Scan(&n)
		if n != 1 {
			t.Fatalf("%d rows", n)
		}
		// Still the same job once it succeeded.
		f.runUntil(t, time.Second, "success", func() bool { return f.get(t, first.JobID).Status == StatusSucceeded })
		if again := f.submit(t, "noop", "AAPL", "2026-01-02"); again.Created || again.JobID != first.JobID || again.Status != StatusSucceeded {
			t.Fatalf("after success: %+v", again)
		}
	})
}

// Only one active job per key, enforced by the database: many submitters
// on separate connections (separate handles: on SQLite the in-process
// writer lock would otherwise serialise them before the database does).
func TestConcurrentSubmitters(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		const handles, per = 4, 8
		var stores []*Store
		for i := 0; i < handles; i++ {
			h, err := sqldb.Open(ctx, dbURL(t, db), "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close() })
			stores = append(stores, newFixture(t, h, nil).store)
		}
		for round := 0; round < 3; round++ {
			asof := fmt.Sprintf("2026-01-%02d", round+1)
			var mu sync.Mutex
			ids := map[string]int{}
			created := 0
			var wg sync.WaitGroup
			start := make(chan struct{})
			for _, s := range stores {
				for j := 0; j < per; j++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						c, err := s.Submit(ctx, Request{JobType: "noop", Symbol: "AAPL", Asof: asof, RequestedBy: "race"})
						if err != nil {
							t.Errorf("submit: %v", err)
							return
						}
						mu.Lock()
						defer mu.Unlock()
						ids[c.JobID]++
						if c.Created {
							created++
						}
					}()
				}
			}
			close(start)
			wg.Wait()
			if len(ids) != 1 || created != 1 {
				t.Fatalf("round %d: %d job ids, %d created; want one job created once", round, len(ids), created)
			}
		}
		// The database itself refuses a second active row, whoever inserts it.
		now := sqldb.Micros(time.Now())
		_, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO pipeline_jobs (job_id, idempotency_key, job_type, symbol, asof, requested_by, status, max_attempts, created_at, updated_at)
			VALUES (?, ?, 'prices', 'AAPL', '2026-01-01', 'sql', 'running', 5, ?, ?)`), NewJobID(), MakeIdempotencyKey("noop", "AAPL", "2026-01-01"), now, now)
		if !sqldb.IsUniqueViolation(err) {
			t.Fatalf("second active row: %v, want a unique violation", err)
		}
	})
}

func TestTransitionTable(t *testing.T) {
	cases := []struct {
		from, to string
		ok       bool
	}{
		{StatusQueued, StatusRunning, true},
		{StatusRunning, StatusSucceeded, true},
		{StatusRunning, StatusFailed, true},
		{StatusFailed, StatusDeadLetter, true},
		{StatusFailed, StatusQueued, true},
		{StatusDeadLetter, StatusQueued, true},
		{StatusSucceeded, StatusRunning, false},
		{StatusSucceeded, StatusQueued, false},
		{StatusSucceeded, StatusFailed, false},
		{StatusRunning, StatusQueued, false},
		{StatusQueued, StatusSucceeded, false},
		{StatusDeadLetter, StatusRunning, false},
	}
	for _, c := range cases {
		err := Transitions.Check(c.from, c.to)
		if (err == nil) != c.ok {
			t.Errorf("%s -> %s: %v", c.from, c.to, err)
		}
		if err != nil && !errors.Is(err, lease.ErrInvalidTransition) {
			t.Errorf("%s -> %s: error %T is not ErrInvalidTransition", c.from, c.to, err)
		}
	}
}

// States never regress: a succeeded job cannot be moved back to running,
// neither by a stale worker nor by a fresh claim.
func TestNoRegression(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		c := f.submit(t, "noop", "AAPL", "2026-01-02")
		jobs, err := f.store.Claim(ctx, "w1", 1, time.Minute)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %d", err, len(jobs))
		}
		j := jobs[0]
		if r := f.get(t, c.JobID); r.Status != StatusRunning || r.StartedAt == nil {
			t.Fatalf("running record %+v", r)
		}
		if err := f.store.SetSucceeded(ctx, j, time.Now(), "ref"); err != nil {
			t.Fatal(err)
		}
		err = db.Tx(ctx, func(tx *sql.Tx) error { return f.store.q.Move(ctx, tx, &j.Claim, StatusRunning, time.Now(), "") })
		if !errors.Is(err, lease.ErrInvalidTransition) {
			t.Fatalf("succeeded -> running: %v", err)
		}
		// A stale copy of the lease that still says running cannot write.
		stale := *j
		stale.Status = StatusRunning
		if err := f.store.SetSucceeded(ctx, &stale, time.Now(), "other"); !errors.Is(err, lease.ErrStale) {
			t.Fatalf("stale write: %v", err)
		}
		if _, err := f.store.Fail(ctx, &stale, Fail(CodeQualityFailed, "late")); !errors.Is(err, lease.ErrStale) {
			t.Fatalf("stale fail: %v", err)
		}
		if again, _ := f.store.Claim(ctx, "w2", 1, time.Minute); len(again) != 0 {
			t.Fatalf("succeeded job claimed again")
		}
		if r := f.get(t, c.JobID); r.Status != StatusSucceeded || r.ResultRef != "ref" || r.LastError != nil ||
			r.StartedAt == nil || r.FinishedAt == nil || r.StartedAt.After(*r.FinishedAt) || r.Attempts != 1 {
			t.Fatalf("record %+v", r)
		}
		if _, err := f.store.Redrive(ctx, c.JobID); !errors.Is(err, lease.ErrInvalidTransition) {
			t.Fatalf("redrive succeeded: %v", err)
		}
	})
}

// §7 "Empty upstream": failed with UPSTREAM_EMPTY at attempt 1, no storage
// write, not retried; the same key may then run again (a new job).
func TestEmptyUpstreamAndNewRun(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db, nil)
		var stored atomic.Int64
		f.register(t, "prices",
			stage("fetch", nil, Fail(CodeUpstreamEmpty, "no rows for AAPL on 2026-01-02"), nil),
			stage("storage", "ref", nil, &stored))
		c := f.submit(t, "prices", "AAPL", "2026-01-02")
		f.runUntil(t, time.Second, "failure", func() bool { return f.get(t, c.JobID).Status == StatusFailed })
		r := f.get(t, c.JobID)
		if r.LastError == nil || r.LastError.ErrorCode != CodeUpstreamEmpty || r.LastError.Attempt != 1 || r.Attempts != 1 {
			t.Fatalf("record %+v %+v", r, r.LastError)
		}
		if stored.Load() != 0 {
			t.Fatal("storage ran after an empty fetch")
		}
		again := f.submit(t, "prices", "AAPL", "2026-01-02")
		if !again.Created || again.JobID == c.JobID {
			t.Fatalf("after failed: %+v, want a new run", again)
		}
		for _, want := range []string{`"job_id":"` + c.JobID + `"`, `"idempotency_key":"pk1:`, `"symbol":"AAPL"`, `"asof":"2026-01-02"`, `"status":"failed"`, `"error_code":"UPSTREAM_EMPTY"`, `"attempt":1`} {
			if !contains(f.logs.String(), want) {
				t.Fatalf("logs lack %s:\n%s", want, f.logs.String())
			}
		}
	})
}

// A retryable failure goes back to the queue until max_attempts, then to
// the DLQ; a redrive brings it back with a fresh budget, and a new run
// created meanwhile makes the redrive a conflict.
func TestRetryDeadLetterRedrive(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		var runs atomic.Int64
		f.register(t, "prices", stage("storage", nil, Fail(CodeStorageWriteFailed, "bucket said 503 at https://u:pw@s3.example/x"), &runs))
		c := f.submit(t, "prices", "AAPL", "2026-01-02")
		f.runUntil(t, time.Second, "dead letter", func() bool { return f.get(t, c.JobID).Status == StatusDeadLetter })
		r := f.get(t, c.JobID)
		if runs.Load() != 5 || r.Attempts != 5 || r.LastError.Attempt != 5 || r.LastError.ErrorCode != CodeStorageWriteFailed {
			t.Fatalf("runs %d record %+v %+v", runs.Load(), r, r.LastError)
		}
		if contains(r.LastError.ErrorMessage, "pw@") {
			t.Fatalf("message not redacted: %s", r.LastError.ErrorMessage)
		}
		dlq, err := f.store.List(ctx, Filter{Status: StatusDeadLetter})
		if err != nil || len(dlq.Jobs) != 1 || dlq.Jobs[0].JobID != c.JobID {
			t.Fatalf("dlq %+v %v", dlq, err)
		}
		red, err := f.store.Redrive(ctx, c.JobID)
		if err != nil || red.Status != StatusQueued || red.Attempts != 0 {
			t.Fatalf("redrive %+v %v", red, err)
		}
		// Fail it to the DLQ again, then create a new run of its key.
		f.runUntil(t, time.Second, "dead letter again", func() bool { return f.get(t, c.JobID).Status == StatusDeadLetter })
		n := f.submit(t, "prices", "AAPL", "2026-01-02")
		if !n.Created {
			t.Fatalf("new run after dead_letter: %+v", n)
		}
		if _, err := f.store.Redrive(ctx, c.JobID); !errors.Is(err, ErrConflict) {
			t.Fatalf("redrive with an active run: %v", err)
		}
		if _, err := f.store.Redrive(ctx, NewJobID()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("redrive unknown: %v", err)
		}
	})
}

// §5.2: "if attempts ≥ max_attempts, move to DLQ" — whatever the last
// failure's code: a final code at the last attempt dead-letters the job
// too, where before it the same code leaves it failed.
func TestFailureAtMaxAttemptsDeadLetters(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		for _, tt := range []struct {
			name       string
			max        int
			retryFirst int // attempts failing with a retryable code before the final one
			want       string
		}{
			{"final code on the last attempt", 5, 4, StatusDeadLetter},
			{"final code with max_attempts 1", 1, 0, StatusDeadLetter},
			{"final code before the last attempt", 5, 2, StatusFailed},
		} {
			t.Run(tt.name, func(t *testing.T) {
				f := newFixture(t, db, nil)
				f.store.MaxAttempts = tt.max
				var runs atomic.Int64
				f.register(t, "prices", StageFunc{StageName: "storage", Fn: func(ctx context.Context, m JobMessage, in any) (any, error) {
					if runs.Add(1) <= int64(tt.retryFirst) {
						return nil, Fail(CodeStorageWriteFailed, "bucket said 503")
					}
					return nil, Fail(CodeQualityFailed, "bad data")
				}})
				c := f.submit(t, "prices", "AAPL", "2026-01-02")
				f.runUntil(t, time.Second, "a terminal status", func() bool {
					s := f.get(t, c.JobID).Status
					return s == StatusFailed || s == StatusDeadLetter
				})
				r := f.get(t, c.JobID)
				if r.Status != tt.want || r.LastError == nil || r.LastError.ErrorCode != CodeQualityFailed || r.Attempts != tt.retryFirst+1 {
					t.Fatalf("status %s attempts %d error %+v, want %s", r.Status, r.Attempts, r.LastError, tt.want)
				}
			})
		}
	})
}

// A lease that is not renewed expires: the message reappears with the
// attempt counted and VISIBILITY_TIMEOUT recorded, and after max_attempts
// it is dead-lettered (fake clock, no waiting).
func TestVisibilityTimeoutReappears(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Now())
		f := newFixture(t, db, clk.Now)
		c := f.submit(t, "noop", "AAPL", "2026-01-02")
		var first *Job
		var claimedAt time.Time
		for attempt := 1; attempt <= 5; attempt++ {
			jobs, err := f.store.Claim(ctx, fmt.Sprint("w", attempt), 1, 30*time.Second)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("attempt %d: claim %v %d", attempt, err, len(jobs))
			}
			claimedAt = jobs[0].At
			if jobs[0].Msg.Attempt != attempt {
				t.Fatalf("attempt %d: message attempt %d", attempt, jobs[0].Msg.Attempt)
			}
			if first == nil {
				first = jobs[0]
			}
			// Invisible to others until the timeout.
			clk.Add(29 * time.Second)
			if other, _ := f.store.Claim(ctx, "other", 1, 30*time.Second); len(other) != 0 {
				t.Fatalf("attempt %d: visible before the timeout", attempt)
			}
			clk.Add(2 * time.Second)
			if attempt > 1 {
				if r := f.get(t, c.JobID); r.LastError == nil || r.LastError.ErrorCode != CodeVisibilityTimeout || r.LastError.Attempt != attempt-1 {
					t.Fatalf("attempt %d: %+v", attempt, r.LastError)
				}
			}
		}
		if n, err := f.store.Reclaim(ctx, 10); err != nil || n != 1 {
			t.Fatalf("reclaim %d %v", n, err)
		}
		r := f.get(t, c.JobID)
		if r.Status != StatusDeadLetter || r.LastError.Attempt != 5 || r.LastError.ErrorCode != CodeVisibilityTimeout {
			t.Fatalf("after 5 timeouts: %+v %+v", r, r.LastError)
		}
		// The lost attempt started when it was claimed, not when the
		// reclaim noticed it was lost.
		if r.StartedAt == nil || !r.StartedAt.Equal(claimedAt.Truncate(time.Microsecond)) {
			t.Fatalf("started_at %v, want the last claim's %v", r.StartedAt, claimedAt)
		}
		// The first worker's lease is long gone: its writes are fenced out.
		if err := f.store.SetSucceeded(ctx, first, clk.Now(), "late"); !errors.Is(err, lease.ErrStale) {
			t.Fatalf("late success: %v", err)
		}
	})
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func counterValue(t testing.TB, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func TestSecretsSealed(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		keys, err := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := OpenSecret(ctx, db, keys, StorageSecret); !errors.Is(err, ErrNoSecret) {
			t.Fatalf("unset: %v", err)
		}
		for _, v := range []string{"first-secret", "second-secret"} {
			if err := SaveSecret(ctx, db, keys, StorageSecret, "AKID", v); err != nil {
				t.Fatal(err)
			}
			pub, sec, err := OpenSecret(ctx, db, keys, StorageSecret)
			if err != nil || pub != "AKID" || sec != v {
				t.Fatalf("%s %s %v", pub, sec, err)
			}
		}
		var raw []byte
		_ = db.QueryRowContext(ctx, "SELECT secret_encrypted FROM pipeline_secrets").Scan(&raw)
		if strings.Contains(string(raw), "second-secret") {
			t.Fatal("secret stored in the clear")
		}
		other, _ := credentials.ParseKeyring("k2:"+credentials.NewKey(), "")
		if _, _, err := OpenSecret(ctx, db, other, StorageSecret); err == nil {
			t.Fatal("opened with another keyring")
		}
	})
}

func TestRedact(t *testing.T) {
	cases := map[string]string{
		"GET https://s3/x?X-Amz-Signature=abcdef&part=1 failed": "GET https://s3/x?X-Amz-Signature=[REDACTED]&part=1 failed",
		"Authorization: Bearer eop_abc123 refused":              "Authorization: Bearer [REDACTED] refused",
		"token eop_zzz leaked":                                  "token [REDACTED] leaked",
		`{"secret_key":"s3cr3t"}`:                               `{"secret_key":"[REDACTED]"}`,
		"password=abc port=5432":                                "password=[REDACTED] port=5432",
		"plain message":                                         "plain message",
		"s3://bucket/edge_daily/e/2026-01-02.json":              "s3://bucket/edge_daily/e/2026-01-02.json",
		"EUTERPE_DATABASE_URL=postgres://u:pw@db:5432/x":        "EUTERPE_DATABASE_URL=postgres://u:[REDACTED]@db:5432/x",
		"dsn=postgres://u:p@ss@db/x;":                           "dsn=postgres://u:[REDACTED]@db/x;",
		"https://host:8080/a@b":                                 "https://host:[REDACTED]@b", // reads as user:8080/pw@b too
	}
	for in, want := range cases {
		if got := Redact(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
	if got := Redact("dsn postgres://u:hunter2@db/x down"); strings.Contains(got, "hunter2") {
		t.Errorf("password kept: %q", got)
	}
	if n := len(Redact(strings.Repeat("é", 600))); n > 512 {
		t.Errorf("capped to %d bytes", n)
	}
	// A result_ref is redacted alike but not capped (up to 2048).
	long := "s3://bucket/" + strings.Repeat("k", 1500)
	if got := RedactRef(long); got != long {
		t.Errorf("RedactRef changed a plain reference")
	}
	if got := RedactRef("s3://b/k?X-Amz-Signature=abc"); got != "s3://b/k?X-Amz-Signature=[REDACTED]" {
		t.Errorf("RedactRef: %q", got)
	}
}

// The claim stamps the start by the lease's database-corrected clock and
// a caller finishes by its own; a finish time that reads earlier than the
// start (the two clocks' estimates differ by up to half a round trip) is
// recorded at the start instead, on every final write.
func TestFinishNeverBeforeStart(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		writes := []struct {
			name  string
			write func(j *Job, at time.Time) error
		}{
			{"succeeded", func(j *Job, at time.Time) error { return f.store.SetSucceeded(ctx, j, at, "ref") }},
			{"failed", func(j *Job, at time.Time) error {
				return f.store.SetFailed(ctx, j, at, Fail(CodeQualityFailed, "bad"), j.Attempt)
			}},
			{"many", func(j *Job, _ time.Time) error { return f.store.SucceedMany(ctx, []*Job{j}, []string{"ref"})[0] }},
		}
		for i, w := range writes {
			c := f.submit(t, "noop", "AAPL", fmt.Sprintf("2026-02-%02d", i+1))
			jobs, err := f.store.Claim(ctx, "w1", 1, time.Minute)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("%s: claim: %v %d", w.name, err, len(jobs))
			}
			// The batched write takes its time from the store's clock: move
			// the claim's stamp ahead of it instead.
			jobs[0].At = jobs[0].At.Add(50 * time.Millisecond)
			if err := db.Tx(ctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, db.Rebind("UPDATE pipeline_jobs SET updated_at = ? WHERE job_id = ?"),
					sqldb.Micros(jobs[0].At), c.JobID)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := w.write(jobs[0], jobs[0].At.Add(-10*time.Millisecond)); err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			r := f.get(t, c.JobID)
			if r.StartedAt == nil || r.FinishedAt == nil || r.StartedAt.After(*r.FinishedAt) {
				t.Fatalf("%s: started %v finished %v", w.name, r.StartedAt, r.FinishedAt)
			}
		}
	})
}

// Two redrives of one dead letter at once (two operators, a retried
// request): one takes it back to the queue, the other is refused as an
// invalid transition on both engines — on Postgres the loser has read
// dead_letter before the winner committed and finds the row changed under
// its lock.
func TestConcurrentRedrivesOneWins(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		f.store.MaxAttempts = 1
		f.register(t, "prices", stage("storage", nil, Fail(CodeQualityFailed, "bad data"), nil))
		c := f.submit(t, "prices", "AAPL", "2026-01-02")
		f.runUntil(t, 5*time.Second, "dead letter", func() bool { return f.get(t, c.JobID).Status == StatusDeadLetter })

		var hold *sql.Tx
		if db.Engine == sqldb.Postgres {
			// Hold the row so both redrives read dead_letter, then queue
			// behind this lock at their UPDATE.
			var err error
			if hold, err = db.BeginTx(ctx, nil); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = hold.Rollback() }()
			if _, err := hold.ExecContext(ctx, `SELECT 1 FROM pipeline_jobs WHERE job_id = $1 FOR UPDATE`, c.JobID); err != nil {
				t.Fatal(err)
			}
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := f.store.Redrive(ctx, c.JobID)
				errs <- err
			}()
		}
		if hold != nil {
			deadline := time.Now().Add(20 * time.Second)
			for {
				var waiting int
				if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
					AND query LIKE 'UPDATE pipeline_jobs SET status%' AND datname = current_database()`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d redrives waiting on the row lock, want 2", waiting)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := hold.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		var won, refused int
		for range 2 {
			err := <-errs
			var te *lease.TransitionError
			switch {
			case err == nil:
				won++
			case errors.As(err, &te):
				refused++
			default:
				t.Fatalf("redrive: %v", err)
			}
		}
		if won != 1 || refused != 1 {
			t.Fatalf("%d redrives won and %d were refused, want one each", won, refused)
		}
		if r := f.get(t, c.JobID); r.Attempts != 0 {
			t.Fatalf("after the redrives: %+v", r)
		}
	})
}
