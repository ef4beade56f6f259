package runner_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
)

// TestTricklingSourceTimesOut: a source server that sends a byte now and
// then moves the progress clock, so the stall timeout never fires; the
// fetch as a whole is bounded by EUTERPE_RUNNER_FETCH_TIMEOUT, a
// retryable storage_timeout, instead of holding the runner's slot for as
// long as the server cares to trickle.
func TestTricklingSourceTimesOut(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		stop := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000000")
			w.WriteHeader(http.StatusOK)
			// Bounded: 20 s at most, then the body ends short.
			for range 200 {
				if _, err := w.Write([]byte{0}); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-stop:
					return
				case <-r.Context().Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(stop) })
		id := e.enqueue("", oneOpus, func(j *inbox.NewJob) {
			j.Source = inbox.Source{URL: srv.URL + "/src.wav?X-Amz-Signature=secret"}
			j.Credentials = credentials.Storage{SourceURL: j.Source.URL, Output: *e.rootCreds()}
		})
		r := e.runner(func(s *runner.Settings) { s.FetchTimeout = time.Second })
		start := time.Now()
		if ok, err := r.RunOnce(context.Background()); err != nil || !ok {
			t.Fatalf("claimed %v, %v", ok, err)
		}
		took := time.Since(start)
		v := e.view(id)
		if v.Status != schema.StatusQueued || v.LastError == nil || v.LastError.Code != "storage_timeout" || took > 10*time.Second {
			t.Fatalf("after %v: status %s err %+v", took, v.Status, v.LastError)
		}
		e.scratchEmpty()
	})
}
