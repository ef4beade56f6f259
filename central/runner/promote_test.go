package runner_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
)

// expiringGate stands in front of the fault proxy for storage whose token
// expired between the attempt's staged uploads and its promotion: while
// expired is set, every PUT to a key outside .euterpe-attempt-* (the
// promotion copy and the re-upload fallback) answers 403 ExpiredToken.
func (e *env) expiringGate() (gateURL string, expired *atomic.Bool) {
	u, err := url.Parse(e.proxy.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	expired = new(atomic.Bool)
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the signed Host header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if expired.Load() && r.Method == http.MethodPut && !strings.Contains(r.URL.Path, ".euterpe-attempt-") {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	e.t.Cleanup(srv.Close)
	return srv.URL, expired
}

// TestPromotionRefreshOutlastsLease: storage refuses the promotion with
// 403 ExpiredToken; the requester answers the refresh call with new
// credentials only after longer than a lease TTL (the heartbeat holds the
// lease meanwhile). The copy tried with the new credentials is fenced
// again, so the job succeeds in the same attempt (it failed as
// storage_unreachable "context deadline exceeded" when the copy's deadline
// was measured from the first fence).
func TestPromotionRefreshOutlastsLease(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ttl := e.settings().LeaseTTL
		e.putWAV("in/src.wav", 1)
		gate, expired := e.expiringGate()
		expired.Store(true)
		var waited atomic.Int64
		rq := e.newRequester(func(jobID string) error {
			start := time.Now()
			time.Sleep(ttl + 200*time.Millisecond)
			waited.Store(int64(time.Since(start)))
			expired.Store(false)
			_, err := e.inbox.UpdateCredentials(ctx, jobID, e.requester.RequesterID,
				credentials.Storage{Source: e.rootCreds(), Output: *e.rootCreds()})
			return err
		})
		id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) {
			j.Source.Endpoint, j.Output.Endpoint = gate, gate
			j.RefreshURL = rq.srv.URL
		})
		v := e.drive(e.runner(nil), id, 60*time.Second)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 || v.CredentialVersion != 2 {
			t.Fatalf("status %s attempts %d credential_version %d err %+v", v.Status, v.AttemptCount, v.CredentialVersion, v.LastError)
		}
		if n := rq.calls.Load(); n != 1 || time.Duration(waited.Load()) <= ttl {
			t.Fatalf("refresh calls %d, requester took %v (lease TTL %v)", n, time.Duration(waited.Load()), ttl)
		}
		outs := e.outputs(v)
		e.checkStored(outs)
		e.noStagedLeft(id, len(outs))
		e.scratchEmpty()
	})
}

// TestSlowPromotionCopyRetried: one server-side copy takes longer than
// EUTERPE_RUNNER_UPLOAD_TIMEOUT (slow storage). The copy's own bound cuts
// it while the attempt is live: a storage timeout, retryable (contract
// §5), so the job goes back to the queue with storage_timeout and succeeds
// on its next attempt instead of ending failed on the first.
func TestSlowPromotionCopyRetried(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		const bound = time.Second
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, nil)
		e.proxy.SlowCopies(1, bound+time.Second)
		m := runner.NewMetrics(nil)
		r := e.runnerMetrics(func(s *runner.Settings) { s.UploadTimeout = bound }, m)
		// The first attempt, stepped alone: the timed-out copy sends the
		// job back to the queue, retryable, with an attempt spent.
		if ok, err := r.RunOnce(context.Background()); err != nil || !ok {
			t.Fatalf("first attempt: claimed %v, %v", ok, err)
		}
		v := e.view(id)
		if v.Status != schema.StatusQueued || v.AttemptCount != 1 || v.LastError == nil || v.LastError.Code != "storage_timeout" {
			t.Fatalf("after the slow copy: status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		if n := counter(t, m.Attempts.WithLabelValues(schema.StatusQueued)); n != 1 {
			t.Fatalf("queued attempts %v, want 1", n)
		}
		v = e.drive(r, id, 60*time.Second)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 2 {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		for _, ev := range e.events(id) {
			if ev == schema.StatusFailed || ev == schema.StatusDeadLetter {
				t.Fatalf("events %v: the slow copy failed the job", e.events(id))
			}
		}
		if e.proxy.Copies() < 2 {
			t.Fatalf("%d copies: the slow one was not retried", e.proxy.Copies())
		}
		e.noStagedLeft(id, len(e.outputs(v)))
		e.scratchEmpty()
	})
}

// TestSlowPromotionCopyOutlastsLease: the server takes longer over a
// promotion copy (a large output on slow storage) than the lease TTL and
// the stall timeout, though within EUTERPE_RUNNER_UPLOAD_TIMEOUT. No byte
// the runner can see moves meanwhile; the heartbeat keeps the lease and
// the copy counts as progress, so the job succeeds on its first attempt
// (fails without: the copy was cut a lease TTL after its fence, a
// storage_timeout on every attempt alike, or recorded transcode_stalled).
func TestSlowPromotionCopyOutlastsLease(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		ttl := e.settings().LeaseTTL
		const stall = 2 * time.Second
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, nil)
		e.proxy.SlowCopies(1, max(ttl, stall)+2*time.Second)
		r := e.runner(func(s *runner.Settings) { s.StallTimeout = stall })
		v := e.drive(r, id, 60*time.Second)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		if n := e.proxy.Copies(); n != 1 {
			t.Fatalf("%d copies, want the one slow copy", n)
		}
		outs := e.outputs(v)
		e.checkStored(outs)
		e.noStagedLeft(id, len(outs))
		e.scratchEmpty()
	})
}

// noStagedLeft fails unless the job's prefix holds exactly n objects, none
// of them staged, and no incomplete multipart upload (a source above
// storage.Client.CopyPartSize is copied in parts: one a timeout cut must be
// aborted).
func (e *env) noStagedLeft(id string, n int) {
	e.t.Helper()
	for u := range e.s3.Client.ListIncompleteUploads(context.Background(), e.s3.Name, "out/"+id+"/", true) {
		e.t.Fatalf("incomplete upload left: %s %s %v", u.Key, u.UploadID, u.Err)
	}
	got := 0
	for obj := range e.s3.Client.ListObjects(context.Background(), e.s3.Name, minio.ListObjectsOptions{Prefix: "out/" + id + "/", Recursive: true}) {
		if obj.Err != nil || strings.Contains(obj.Key, ".euterpe-attempt-") {
			e.t.Fatalf("left behind: %s %v", obj.Key, obj.Err)
		}
		got++
	}
	if got != n {
		e.t.Fatalf("%d objects under the prefix, %d outputs", got, n)
	}
}

// commitLost is the inbox as a runner sees a database that fails the
// success write once (a failover, a connection reset), not a stale claim.
type commitLost struct {
	*inbox.Store
	failed atomic.Bool
}

func (c *commitLost) Succeed(ctx context.Context, j *inbox.Job, outputs []inbox.OutputFile) error {
	if c.failed.CompareAndSwap(false, true) {
		return errors.New("commit: read tcp 10.0.0.5:5432: connection reset by peer")
	}
	return c.Store.Succeed(ctx, j, outputs)
}

// TestSucceedFailureRemovesPromotedOutputs: every output was promoted to
// its final key, then the success write failed. The attempt removes them —
// a job that has not succeeded leaves nothing at its final keys, so one
// whose later attempts end failed does not leave outputs beside the
// failure — and the retry writes them again.
func TestSucceedFailureRemovesPromotedOutputs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, nil)
		jobs := &commitLost{Store: e.inbox}
		r := e.runnerOptions(nil, func(o *runner.Options) { o.Jobs = jobs })
		if ok, err := r.RunOnce(context.Background()); err != nil || !ok {
			t.Fatalf("first attempt: claimed %v, %v", ok, err)
		}
		v := e.view(id)
		if v.Status != schema.StatusQueued || v.AttemptCount != 1 {
			t.Fatalf("after the lost success: status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		e.noStagedLeft(id, 0)
		if _, err := e.db.Exec(e.db.Rebind(`UPDATE inbox_jobs SET next_attempt_at = 0 WHERE id = ?`), id); err != nil {
			t.Fatal(err)
		}
		v = e.drive(r, id, 60*time.Second)
		if v.Status != schema.StatusSucceeded {
			t.Fatalf("status %s err %+v", v.Status, v.LastError)
		}
		outs := e.outputs(v)
		e.checkStored(outs)
		e.noStagedLeft(id, len(outs))
	})
}
