package runner_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
)

// TestFailedPromotionLeavesNoOutputs: the first rendition is promoted to
// its final key, then storage refuses the second one's promotion for good.
// The job fails, and no final key of it is left for the requester to take
// for an output of a job that did not succeed.
func TestFailedPromotionLeavesNoOutputs(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		u, err := url.Parse(e.proxy.URL)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/b.ogg") && !strings.Contains(r.URL.Path, ".euterpe-attempt-") {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidRequest</Code><Message>refused</Message></Error>`))
				return
			}
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(gate.Close)
		rends := []inbox.Rendition{{Name: "a", Codec: "opus", BitrateKbps: 64}, {Name: "b", Codec: "opus", BitrateKbps: 64}}
		id := e.enqueue("in/src.wav", rends, func(j *inbox.NewJob) {
			j.Output.Endpoint = gate.URL
			j.MaxAttempts = 1
		})
		v := e.drive(e.runner(nil), id, 30*time.Second)
		if v.Status != schema.StatusDeadLetter || v.LastError == nil || v.LastError.Code != "storage_rejected" {
			t.Fatalf("status %s err %+v", v.Status, v.LastError)
		}
		for obj := range e.s3.Client.ListObjects(context.Background(), e.s3.Name, minio.ListObjectsOptions{Prefix: "out/" + id + "/", Recursive: true}) {
			t.Errorf("left under the prefix of a failed job: %s %v", obj.Key, obj.Err)
		}
		e.scratchEmpty()
	})
}
