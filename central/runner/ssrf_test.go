package runner_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/ssrf"
)

// TestRefreshURLRefusedByPolicy: with the production address policy (no
// private addresses) a refresh_url on loopback is refused before any
// request leaves: nothing reaches the receiver, every refresh attempt of
// the budget ends "not refreshed", and the attempt takes the
// credentials_expired retry path.
func TestRefreshURLRefusedByPolicy(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		rq := e.newRequester(func(jobID string) error {
			return e.sendCredentials(jobID, credentials.Storage{Source: e.rootCreds(), Output: *e.rootCreds()})
		})
		bad := &credentials.S3{AccessKeyID: e.s3.AccessKey, SecretAccessKey: "expired-secret"}
		id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) {
			j.Credentials = credentials.Storage{Source: bad, Output: *e.rootCreds()}
			j.RefreshURL = rq.srv.URL + "/refresh"
		})
		m := runner.NewMetrics(nil)
		r := e.runnerOptions(nil, func(o *runner.Options) {
			o.RefreshClient = ssrf.Policy{}.NewClient(ssrf.ClientOptions{Timeout: 5 * time.Second})
			o.Metrics = m
		})
		if ok, err := r.RunOnce(context.Background()); !ok || err != nil {
			t.Fatalf("RunOnce: %v %v", ok, err)
		}
		if n := rq.hits.Load(); n != 0 {
			t.Fatalf("%d requests reached the loopback refresh receiver", n)
		}
		v := e.view(id)
		if v.Status != schema.StatusQueued || v.AttemptCount != 1 || v.LastError == nil || v.LastError.Code != "credentials_expired" ||
			v.CredentialVersion != 1 || v.NextAttemptAt == nil {
			t.Fatalf("status %s attempts %d err %+v cv %d", v.Status, v.AttemptCount, v.LastError, v.CredentialVersion)
		}
		ceiling := testPolicy().MaxRefreshAttempts
		if got := counter(t, m.Refreshes.WithLabelValues("not_refreshed")); got != float64(ceiling) {
			t.Fatalf("not_refreshed %v, want %d", got, ceiling)
		}
		if got := counter(t, m.Refreshes.WithLabelValues("refreshed")); got != 0 {
			t.Fatalf("refreshed %v", got)
		}
		e.scratchEmpty()
	})
}

// TestStorageRefusedByPolicy: with the production address policy a storage
// endpoint on loopback is refused before any request leaves, and the job
// fails permanently with destination_refused after one attempt: the same
// address would be refused on every retry.
func TestStorageRefusedByPolicy(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		id := e.enqueue("in/src.wav", oneOpus, nil)
		r := e.runnerOptions(nil, func(o *runner.Options) { o.StorageDial = ssrf.Policy{}.DialContext })
		v := e.drive(r, id, 20*time.Second)
		if v.Status != schema.StatusFailed || v.AttemptCount != 1 || v.LastError == nil || v.LastError.Code != "destination_refused" {
			t.Fatalf("status %s attempts %d err %+v", v.Status, v.AttemptCount, v.LastError)
		}
		for _, m := range []string{http.MethodHead, http.MethodGet, http.MethodPut, http.MethodPost} {
			if n := e.proxy.Requests(m); n != 0 {
				t.Fatalf("%d %s requests reached storage", n, m)
			}
		}
		e.scratchEmpty()
	})
}
