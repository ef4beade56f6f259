package policy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// halfJitter makes Backoff.Delay(n) exactly half of Ceiling(n).
var halfJitter = lease.Backoff{Base: time.Second, Cap: 8 * time.Second, Rand: func() float64 { return 0.5 }}

func TestRecoverStaleJobs(t *testing.T) {
	if policy.CodeLeaseExpired != "lease_expired" {
		t.Fatalf("recovery code %q", policy.CodeLeaseExpired)
	}
	cases := []struct {
		name    string
		kind    string
		status  string
		lease   *int64 // lease_expires_at; nil = NULL
		recover bool
	}{
		{"running scan, lease expired", store.KindScan, store.StatusRunning, at(-time.Second), true},
		{"running hash, lease expires now", store.KindHash, store.StatusRunning, at(0), true},
		{"running delete, no lease", store.KindDelete, store.StatusRunning, nil, true},
		{"running scan, live lease", store.KindScan, store.StatusRunning, at(time.Millisecond), false},
		{"pending scan with an old lease", store.KindScan, store.StatusPending, at(-time.Hour), false},
		{"completed hash with an old lease", store.KindHash, store.StatusCompleted, at(-time.Hour), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			id := e.insert("jobs", map[string]any{"kind": c.kind, "status": c.status, "worker_id": "w1#abc",
				"worker_heartbeat_at": t0 - 10_000, "lease_expires_at": nullable(c.lease), "retry_count": 1})
			n, err := e.p.RecoverStaleJobs(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			j := e.job(id)
			if !c.recover {
				if n != 0 || j.Status != c.status || j.WorkerID == nil {
					t.Fatalf("recovered=%d, row %+v changed", n, j)
				}
				return
			}
			if n != 1 {
				t.Fatalf("recovered %d rows, want 1", n)
			}
			if j.Status != store.StatusRetryable || j.WorkerID != nil || j.HeartbeatAt != nil || j.LeaseExpiresAt != nil {
				t.Fatalf("lease fields not cleared: %+v", j)
			}
			if deref(j.ErrorCode) != policy.CodeLeaseExpired || deref(j.ErrorMessage) != "recovered: lease of worker w1#abc expired" {
				t.Fatalf("recovery metadata %q %q", deref(j.ErrorCode), deref(j.ErrorMessage))
			}
			if j.FinishedAt == nil || *j.FinishedAt != t0 || j.UpdatedAt != t0 || j.RetryCount != 1 {
				t.Fatalf("recovery times/retries %+v", j)
			}
		})
	}
}

func TestRequeueRetryable(t *testing.T) {
	type row struct {
		kind, status string
		retries      int64
		after        *int64
	}
	type want struct {
		status  string
		retries int64
		after   any // int64 or nil
	}
	cases := []struct {
		name       string
		maxRetries int
		rows       []row
		want       []want
	}{
		{"first pass sets a backoff retry_after and keeps the row", 3,
			[]row{{"scan", "retryable", 0, nil}, {"hash", "retryable", 2, nil}},
			[]want{{"retryable", 0, t0 + 500}, {"retryable", 2, t0 + 2000}}},
		{"not due yet", 3,
			[]row{{"scan", "retryable", 1, at(time.Millisecond)}},
			[]want{{"retryable", 1, t0 + 1}}},
		{"due row goes back to pending with retry_count+1", 3,
			[]row{{"hash", "retryable", 1, at(0)}},
			[]want{{"pending", 2, nil}}},
		{"retries exhausted -> failed", 3,
			[]row{{"scan", "retryable", 3, at(-time.Second)}},
			[]want{{"failed", 3, t0 - 1000}}},
		{"a delete never gives up: it alone can finish or undo what it began", 3,
			[]row{{"delete", "retryable", 3, at(-time.Second)}},
			[]want{{"pending", 4, nil}}},
		{"retries spent: failed at once, without waiting a backoff", 3,
			[]row{{"hash", "retryable", 3, nil}},
			[]want{{"failed", 3, nil}}},
		{"no retries: a recovered scan fails at its first recovery", 0,
			[]row{{"scan", "retryable", 0, nil}, {"hash", "retryable", 0, at(-time.Second)}},
			[]want{{"failed", 0, nil}, {"failed", 0, t0 - 1000}}},
		{"no retries: a delete is still retried", 0,
			[]row{{"delete", "retryable", 0, at(-time.Second)}},
			[]want{{"pending", 1, nil}}},
		{"due scan waits while another scan is active", 3,
			[]row{{"scan", "pending", 0, nil}, {"scan", "retryable", 0, at(-time.Second)}},
			[]want{{"pending", 0, nil}, {"retryable", 0, t0 - 1000}}},
		{"two due scan/hash rows: only one is requeued", 3,
			[]row{{"hash", "retryable", 0, at(-time.Second)}, {"scan", "retryable", 0, at(-time.Second)}},
			[]want{{"pending", 1, nil}, {"retryable", 0, t0 - 1000}}},
		{"delete is requeued while a scan is active", 3,
			[]row{{"scan", "running", 0, nil}, {"delete", "retryable", 0, at(-time.Second)}},
			[]want{{"running", 0, nil}, {"pending", 1, nil}}},
		{"other states are untouched", 3,
			[]row{{"delete", "failed", 9, at(-time.Hour)}, {"delete", "pending", 0, at(-time.Hour)}},
			[]want{{"failed", 9, t0 - 3_600_000}, {"pending", 0, t0 - 3_600_000}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.p.MaxJobRetries = c.maxRetries
			var ids []int64
			for _, r := range c.rows {
				ids = append(ids, e.insert("jobs", map[string]any{"kind": r.kind, "status": r.status,
					"retry_count": r.retries, "retry_after": nullable(r.after), "error_message": "boom", "finished_at": t0 - 5}))
			}
			if err := e.p.RequeueRetryable(context.Background(), halfJitter); err != nil {
				t.Fatal(err)
			}
			for i, id := range ids {
				j := e.job(id)
				if j.Status != c.want[i].status || j.RetryCount != c.want[i].retries || derefInt(j.RetryAfter) != c.want[i].after {
					t.Errorf("row %d: %s retries=%d after=%v, want %+v", i, j.Status, j.RetryCount, derefInt(j.RetryAfter), c.want[i])
				}
				if j.Status == store.StatusFailed && c.rows[i].status == store.StatusRetryable &&
					!strings.HasPrefix(deref(j.ErrorMessage), fmt.Sprintf("gave up after %d retries: boom", c.rows[i].retries)) {
					t.Errorf("failed message %q", deref(j.ErrorMessage))
				}
				// A requeued job has not finished; its last error stays
				// as history until its next finish replaces it.
				if j.Status == store.StatusPending && c.rows[i].status == store.StatusRetryable &&
					(j.FinishedAt != nil || deref(j.ErrorMessage) != "boom") {
					t.Errorf("requeued row: finished_at %v, error_message %q; want none and the last error", derefInt(j.FinishedAt), deref(j.ErrorMessage))
				}
			}
		})
	}
}

// TestStaleScanRetriesUntilFailed follows one scan through the whole
// policy cycle: each expired lease makes it retryable, it waits out its
// backoff, is requeued, and once the retries are spent it fails.
func TestStaleScanRetriesUntilFailed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.p.MaxJobRetries = 2
	j, err := e.p.EnqueueScan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claim := func() {
		t.Helper()
		if _, err := e.st.DB.Exec(`UPDATE jobs SET status = 'running', worker_id = 'w', lease_expires_at = ? WHERE id = ?`,
			e.now()+1000, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	for attempt := int64(0); ; attempt++ {
		claim()
		e.advance(2 * time.Second) // the worker died; its lease ran out
		if n, _ := e.p.RecoverStaleJobs(ctx); n != 1 {
			t.Fatalf("attempt %d: not recovered", attempt)
		}
		e.p.RequeueRetryable(ctx, halfJitter) // schedules retry_after
		if got := e.job(j.ID); attempt < 2 && got.Status != store.StatusRetryable {
			t.Fatalf("attempt %d: %s before its backoff", attempt, got.Status)
		}
		e.advance(halfJitter.Ceiling(int(attempt) + 1))
		if err := e.p.RequeueRetryable(ctx, halfJitter); err != nil {
			t.Fatal(err)
		}
		got := e.job(j.ID)
		if attempt == 2 {
			if got.Status != store.StatusFailed || got.RetryCount != 2 {
				t.Fatalf("after retries spent: %s retries=%d", got.Status, got.RetryCount)
			}
			return
		}
		if got.Status != store.StatusPending || got.RetryCount != attempt+1 {
			t.Fatalf("attempt %d: %s retries=%d", attempt, got.Status, got.RetryCount)
		}
		if _, err := e.p.EnqueueScan(ctx); err == nil {
			t.Fatal("requeued scan did not take the single active slot")
		}
	}
}

func TestRequeueFailedThumbnails(t *testing.T) {
	type row struct {
		status     string
		errorCount int64
		after      *int64
	}
	cases := []struct {
		name     string
		capacity int
		rows     []row
		want     []string
	}{
		{"due row requeued", 4, []row{{"failed", 1, at(0)}}, []string{"pending"}},
		{"row before retry_after waits", 4, []row{{"failed", 1, at(time.Second)}}, []string{"failed"}},
		{"row without retry_after is not requeued by the scheduler", 4, []row{{"failed", 1, nil}}, []string{"failed"}},
		{"attempts spent", 4, []row{{"failed", 3, at(-time.Minute)}}, []string{"failed"}},
		{"capacity bounds the requeue, earliest retry first", 2,
			[]row{{"running", 0, nil}, {"failed", 1, at(-time.Second)}, {"failed", 1, at(-time.Minute)}},
			[]string{"running", "failed", "pending"}},
		{"full queue requeues nothing", 1, []row{{"pending", 0, nil}, {"failed", 1, at(-time.Minute)}}, []string{"pending", "failed"}},
		{"ready rows untouched", 4, []row{{"ready", 2, at(-time.Minute)}}, []string{"ready"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.p.ThumbQueueCapacity = c.capacity
			var ids []int64
			for i, r := range c.rows {
				ids = append(ids, e.insert("thumbnails", map[string]any{"file_id": i + 1, "status": r.status,
					"error_count": r.errorCount, "retry_after": nullable(r.after)}))
			}
			n, err := e.p.RequeueFailedThumbnails(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			requeued := 0
			for i, id := range ids {
				var status string
				e.st.DB.QueryRow(`SELECT status FROM thumbnails WHERE id = ?`, id).Scan(&status)
				if status != c.want[i] {
					t.Errorf("row %d: %s, want %s", i, status, c.want[i])
				}
				if status == store.StatusPending && c.rows[i].status == store.StatusFailed {
					requeued++
				}
			}
			if int(n) != requeued || (requeued > 0) != (e.wakes.Load() > 0) {
				t.Fatalf("reported %d, requeued %d, wakes %d", n, requeued, e.wakes.Load())
			}
		})
	}
}

// TestAutoHash: a hash pass follows a completed scan that left work, and any
// completed scan or hash while files hashed with another algorithm than the
// configured one remain (the setting was changed); never while a scan/hash
// job is active or failed, and never for files it already could not hash.
// The pass it enqueues has the configured algorithm and first puts the other
// algorithm's files back in the hash queue.
func TestAutoHash(t *testing.T) {
	type file struct {
		algo      any // nil: never hashed
		needsHash int
		missing   int
	}
	const digest = "ab"
	cases := []struct {
		name       string
		jobKind    string // "" = no scan/hash job yet
		jobStatus  string
		files      []file
		want       bool
		wantMarked int // files with needs_hash = 1 afterwards
	}{
		{"no job yet", "", "", []file{{nil, 1, 0}}, false, 1},
		{"completed scan, files to hash", store.KindScan, store.StatusCompleted, []file{{nil, 1, 0}}, true, 1},
		{"completed scan, nothing to hash", store.KindScan, store.StatusCompleted, []file{{store.AlgoBLAKE3, 0, 0}}, false, 0},
		{"running scan", store.KindScan, store.StatusRunning, []file{{nil, 1, 0}}, false, 1},
		{"completed hash left an unreadable file", store.KindHash, store.StatusCompleted, []file{{nil, 1, 0}}, false, 1},
		{"completed hash, files of the other algorithm", store.KindHash, store.StatusCompleted,
			[]file{{store.AlgoSHA256, 0, 0}, {store.AlgoSHA256, 0, 0}, {store.AlgoBLAKE3, 0, 0}}, true, 2},
		{"completed scan, files of the other algorithm", store.KindScan, store.StatusCompleted,
			[]file{{store.AlgoSHA256, 0, 0}}, true, 1},
		{"failed hash, files of the other algorithm", store.KindHash, store.StatusFailed, []file{{store.AlgoSHA256, 0, 0}}, false, 0},
		{"other algorithm only on a missing file", store.KindHash, store.StatusCompleted, []file{{store.AlgoSHA256, 0, 1}}, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			if c.jobKind != "" {
				e.insert("jobs", map[string]any{"kind": c.jobKind, "status": c.jobStatus})
			}
			for i, f := range c.files {
				var hash any
				if f.algo != nil {
					hash = digest
				}
				e.insert("library_files", map[string]any{"root": "/lib", "path": "/lib/" + string(rune('a'+i)),
					"size_bytes": 1, "hash_algorithm": f.algo, "content_hash": hash, "needs_hash": f.needsHash, "is_missing": f.missing})
			}
			got, err := e.p.AutoHash(ctx)
			if err != nil || got != c.want {
				t.Fatalf("AutoHash = %v, %v; want %v", got, err, c.want)
			}
			if n := e.count(`SELECT COUNT(*) FROM jobs WHERE kind = 'hash' AND status = 'pending' AND payload = '{"algorithm":"blake3"}'`); (n == 1) != c.want {
				t.Fatalf("%d pending blake3 hash jobs", n)
			}
			if n := e.count(`SELECT COUNT(*) FROM library_files WHERE needs_hash = 1`); n != c.wantMarked {
				t.Fatalf("%d files queued for hashing, want %d", n, c.wantMarked)
			}
		})
	}
}

// TestSchedulerTickClosesStaleScanSessions: a scan killed mid-walk leaves
// its job running and its session running. The tick that recovers the job
// once its lease has expired also closes the session (failed, finished
// then); while the lease is live both are left alone.
func TestSchedulerTickClosesStaleScanSessions(t *testing.T) {
	cases := []struct {
		name   string
		lease  time.Duration // lease_expires_at relative to the tick
		closed bool
	}{
		{"lease expired", -time.Second, true},
		{"lease expires now", 0, true},
		{"lease live", time.Second, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			job := e.insert("jobs", map[string]any{"kind": store.KindScan, "status": store.StatusRunning, "worker_id": "dead#1",
				"worker_heartbeat_at": t0 - 10_000, "lease_expires_at": *at(c.lease)})
			sid := e.insert("scan_sessions", map[string]any{"job_id": job, "status": store.StatusRunning, "started_at": t0 - 10_000})
			if err := policySched(e).Tick(ctx); err != nil {
				t.Fatal(err)
			}
			var status string
			var finished *int64
			var msg *string
			if err := e.st.DB.QueryRow(`SELECT status, finished_at, error_message FROM scan_sessions WHERE id = ?`, sid).
				Scan(&status, &finished, &msg); err != nil {
				t.Fatal(err)
			}
			j := e.job(job)
			if !c.closed {
				if status != store.StatusRunning || finished != nil || j.Status != store.StatusRunning {
					t.Fatalf("live scan touched: session %s finished %v, job %s", status, derefInt(finished), j.Status)
				}
				return
			}
			want := "interrupted: job " + strconv.FormatInt(job, 10) + " is no longer running"
			if j.Status != store.StatusRetryable || status != store.StatusFailed || finished == nil || *finished != t0 || deref(msg) != want {
				t.Fatalf("job %s; session %s finished %v %q, want retryable, failed at %d %q",
					j.Status, status, derefInt(finished), deref(msg), t0, want)
			}
			if n := e.count(`SELECT COUNT(*) FROM scan_sessions WHERE status = 'running'`); n != 0 {
				t.Fatalf("%d sessions still running", n)
			}
		})
	}
}
