package runner_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/webhook"
)

// requester is the test's stand-in for a requester's refresh endpoint: it
// checks the signature like a real requester would and, when update is set,
// answers by sending new credentials to euterpe.
type requester struct {
	hits   atomic.Int32 // every request that reached the receiver
	calls  atomic.Int32
	bad    atomic.Int32 // requests whose signature did not verify
	srv    *httptest.Server
	update func(jobID string) error // nil: accept but never refresh
}

func (e *env) newRequester(update func(jobID string) error) *requester {
	rq := &requester{update: update}
	secret := []byte(e.requester.WebhookSecret)
	rq.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		if _, err := webhook.Verify([][]byte{secret}, r.Header, body, time.Now()); err != nil {
			rq.bad.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		rq.calls.Add(1)
		var req runner.RefreshRequest
		if err := json.Unmarshal(body, &req); err != nil || req.Type != "credentials.refresh" || req.JobID == "" {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		if rq.update != nil {
			if err := rq.update(req.JobID); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	e.t.Cleanup(rq.srv.Close)
	return rq
}

// TestCredentialRefresh: storage rejects the job's credentials (an expired
// or wrong key, for the source or the output); the runner calls refresh_url
// signed with the requester's webhook secret, the requester sends new
// credentials, and the job succeeds in the same attempt.
func TestCredentialRefresh(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		bad := &credentials.S3{AccessKeyID: e.s3.AccessKey, SecretAccessKey: "expired-secret"}
		good := credentials.Storage{Source: e.rootCreds(), Output: *e.rootCreds()}
		rq := e.newRequester(func(jobID string) error { return e.sendCredentials(jobID, good) })
		for _, tc := range []struct {
			name  string
			creds credentials.Storage
		}{
			{"source", credentials.Storage{Source: bad, Output: *e.rootCreds()}},
			{"output", credentials.Storage{Source: e.rootCreds(), Output: *bad}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := rq.calls.Load()
				id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) {
					j.Credentials = tc.creds
					j.RefreshURL = rq.srv.URL + "/refresh"
				})
				m := runner.NewMetrics(nil)
				v := e.drive(e.runnerMetrics(nil, m), id, 30*time.Second)
				if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 || v.CredentialVersion != 2 {
					t.Fatalf("status %s attempts %d credential_version %d err %+v", v.Status, v.AttemptCount, v.CredentialVersion, v.LastError)
				}
				if c, s, r := counter(t, m.Claims), counter(t, m.Attempts.WithLabelValues(runner.OutcomeSucceeded)),
					counter(t, m.Refreshes.WithLabelValues("refreshed")); c != 1 || s != 1 || r != 1 {
					t.Fatalf("metrics: claims %v succeeded %v refreshed %v, want 1 each", c, s, r)
				}
				if n := rq.calls.Load() - before; n != 1 || rq.bad.Load() != 0 {
					t.Fatalf("refresh calls %d, unverified %d", n, rq.bad.Load())
				}
				e.scratchEmpty()
			})
		}
	})
}

// TestRefreshCeilingThenDeadLetter: a requester that never sends new
// credentials gets MaxRefreshAttempts refresh calls in all; each attempt
// then fails (credentials_expired) and is retried until max_attempts, then
// the job is dead-lettered.
func TestRefreshCeilingThenDeadLetter(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		rq := e.newRequester(nil)
		bad := &credentials.S3{AccessKeyID: e.s3.AccessKey, SecretAccessKey: "expired-secret"}
		id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) {
			j.Credentials = credentials.Storage{Source: bad, Output: *e.rootCreds()}
			j.RefreshURL = rq.srv.URL
			j.MaxAttempts = 3
		})
		r := e.runner(func(s *runner.Settings) { s.RefreshWait = 200 * time.Millisecond })
		v := e.drive(r, id, 30*time.Second)
		if v.Status != schema.StatusDeadLetter || v.AttemptCount != 3 || v.LastError.Code != "credentials_expired" || v.CredentialVersion != 1 {
			t.Fatalf("status %s attempts %d err %+v cv %d", v.Status, v.AttemptCount, v.LastError, v.CredentialVersion)
		}
		if n := rq.calls.Load(); n != int32(testPolicy().MaxRefreshAttempts) {
			t.Fatalf("refresh calls %d, want %d", n, testPolicy().MaxRefreshAttempts)
		}
		var refreshCount int
		if err := e.db.QueryRowContext(context.Background(), e.db.Rebind(`SELECT refresh_attempt_count FROM inbox_jobs WHERE id = ?`), id).Scan(&refreshCount); err != nil {
			t.Fatal(err)
		}
		if refreshCount < testPolicy().MaxRefreshAttempts {
			t.Fatalf("refresh_attempt_count %d", refreshCount)
		}
	})
}

// TestUnchangedCredentialsNotRetried: contract §7 step 3 — the runner
// proceeds only if credential_version advanced. A refresh the requester
// acknowledges without sending new credentials is followed by the next
// counted refresh attempt, never by another storage call with the
// credentials storage already refused: one attempt makes one storage
// request and exactly MaxRefreshAttempts refresh calls.
func TestUnchangedCredentialsNotRetried(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		rq := e.newRequester(nil) // accepts, never sends credentials
		bad := &credentials.S3{AccessKeyID: e.s3.AccessKey, SecretAccessKey: "expired-secret"}
		id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) {
			j.Credentials = credentials.Storage{Source: bad, Output: *e.rootCreds()}
			j.RefreshURL = rq.srv.URL
			j.MaxAttempts = 1
		})
		m := runner.NewMetrics(nil)
		v := e.drive(e.runnerMetrics(func(s *runner.Settings) { s.RefreshWait = 100 * time.Millisecond }, m), id, 20*time.Second)
		if v.Status != schema.StatusDeadLetter || v.AttemptCount != 1 || v.LastError.Code != "credentials_expired" || v.CredentialVersion != 1 {
			t.Fatalf("status %s attempts %d err %+v cv %d", v.Status, v.AttemptCount, v.LastError, v.CredentialVersion)
		}
		storageCalls := e.proxy.Requests(http.MethodHead) + e.proxy.Requests(http.MethodGet)
		if storageCalls != 1 {
			t.Fatalf("storage requests %d, want 1: the refused credentials were used again", storageCalls)
		}
		ceiling := testPolicy().MaxRefreshAttempts
		if n := rq.calls.Load(); n != int32(ceiling) {
			t.Fatalf("refresh calls %d, want %d", n, ceiling)
		}
		if got := counter(t, m.Refreshes.WithLabelValues("not_refreshed")); got != float64(ceiling) {
			t.Fatalf("not_refreshed %v, want %d", got, ceiling)
		}
	})
}

// TestAuthFailureWithoutRefreshURL: a job with no refresh_url cannot renew
// its credentials; the attempt fails and retries like any other.
func TestAuthFailureWithoutRefreshURL(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) {
			j.Credentials = credentials.Storage{Source: &credentials.S3{AccessKeyID: e.s3.AccessKey, SecretAccessKey: "wrong"}, Output: *e.rootCreds()}
			j.MaxAttempts = 2
		})
		v := e.drive(e.runner(nil), id, 20*time.Second)
		if v.Status != schema.StatusDeadLetter || v.AttemptCount != 2 || v.LastError.Code != "credentials_expired" {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
	})
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A refresh_url the request cannot even be built from (a bad escape in its
// query) fails without the URL's query, which may hold a token, in the
// error the runner logs and stores.
func TestRefreshURLErrorsHideTheQuery(t *testing.T) {
	const token = "tok-9f2c1e77d0"
	for _, u := range []string{
		"https://requester.example/refresh?token=" + token + "&x=%zz",
		"https://user:" + token + "@requester.example/refresh\x7f",
	} {
		err := runner.CallRefresh(context.Background(), u, runner.RefreshRequest{JobID: "j", CredentialVersion: 1, RefreshAttempt: 1})
		if err == nil || strings.Contains(err.Error(), token) {
			t.Fatalf("%q: err = %v", u, err)
		}
	}
}

// rotating is the inbox as seen when the requester rotates the job's
// credentials on its own just after the runner read them: the first read
// is followed at once by new credentials, so storage refuses credentials
// that are already replaced.
type rotating struct {
	*inbox.Store
	rotate func(jobID string) error
	done   atomic.Bool
}

func (r *rotating) Credentials(ctx context.Context, j *inbox.Job) (credentials.Storage, int, error) {
	c, v, err := r.Store.Credentials(ctx, j)
	if err == nil && r.done.CompareAndSwap(false, true) {
		err = r.rotate(j.ID)
	}
	return c, v, err
}

// TestRefreshAlreadyMadeSpendsNothing: credentials replaced between the
// runner's read and storage's 403 are used as they are: no refresh call,
// no refresh unit counted, and the job succeeds in its first attempt.
func TestRefreshAlreadyMadeSpendsNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		bad := &credentials.S3{AccessKeyID: e.s3.AccessKey, SecretAccessKey: "expired-secret"}
		good := credentials.Storage{Source: e.rootCreds(), Output: *e.rootCreds()}
		rq := e.newRequester(nil)
		id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) {
			j.Credentials = credentials.Storage{Source: bad, Output: *e.rootCreds()}
			j.RefreshURL = rq.srv.URL
		})
		jobs := &rotating{Store: e.inbox, rotate: func(jobID string) error { return e.sendCredentials(jobID, good) }}
		v := e.drive(e.runnerOptions(nil, func(o *runner.Options) { o.Jobs = jobs }), id, 30*time.Second)
		if v.Status != schema.StatusSucceeded || v.AttemptCount != 1 || v.CredentialVersion != 2 {
			t.Fatalf("status %s attempts %d credential_version %d err %+v", v.Status, v.AttemptCount, v.CredentialVersion, v.LastError)
		}
		if n := rq.hits.Load(); n != 0 {
			t.Fatalf("%d refresh calls for credentials already refreshed", n)
		}
		var refreshCount int
		if err := e.db.QueryRowContext(context.Background(), e.db.Rebind(`SELECT refresh_attempt_count FROM inbox_jobs WHERE id = ?`), id).Scan(&refreshCount); err != nil {
			t.Fatal(err)
		}
		if refreshCount != 0 {
			t.Fatalf("refresh_attempt_count %d, want 0", refreshCount)
		}
	})
}
