package runner_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
)

// heldCopyGate stands in front of the fault proxy for storage that never
// answers a promotion copy: the copy is held until the client gives up,
// then, if carry is set, the server carries it out all the same. Requests
// for the copy's destination that come after it wait until the server is
// done with the copy, as one server would order them.
type heldCopyGate struct {
	URL   string
	carry bool

	mu   sync.Mutex
	held chan struct{} // closed once the held copy is carried out or dropped
}

func (e *env) heldCopyGate(carry bool) *heldCopyGate {
	u, err := url.Parse(e.proxy.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	g := &heldCopyGate{carry: carry}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the signed Host header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isCopy := r.Header.Get("X-Amz-Copy-Source") != ""
		g.mu.Lock()
		held := g.held
		first := isCopy && held == nil
		if first {
			held = make(chan struct{})
			g.held = held
		}
		g.mu.Unlock()
		switch {
		case first:
			<-r.Context().Done()
			if g.carry {
				rp.ServeHTTP(httptest.NewRecorder(), r.WithContext(context.WithoutCancel(r.Context())))
			}
			close(held)
			return
		case held != nil && !strings.Contains(r.URL.Path, ".euterpe-attempt-"):
			<-held
		}
		rp.ServeHTTP(w, r)
	}))
	e.t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// TestUnansweredPromotionRemoved: a promotion copy gets no answer within
// its bound (storage_timeout) and the job has no attempt left. Whether the
// server carried the copy out or not, the job leaves no output of its own:
// the copy's final key, written after the client gave up, is removed (it
// was not among the keys known to be promoted), while an earlier job's
// object at that key, which the copy never replaced, is kept (fails
// without: the late copy's output stayed at its final key beside a
// dead_letter job).
func TestUnansweredPromotionRemoved(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.putWAV("in/src.wav", 1)
		cases := []struct {
			name    string
			earlier bool // an earlier job's object at the final key
			carry   bool // the server carries the held copy out
		}{
			{"carried out", false, true},
			{"carried out over an earlier output", true, true},
			{"never carried out, an earlier output there", true, false},
		}
		for _, tc := range cases {
			gate := e.heldCopyGate(tc.carry)
			id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) {
				j.Output.Endpoint = gate.URL
				j.MaxAttempts = 1
			})
			final := "out/" + id + "/o.ogg"
			want := "missing"
			if tc.earlier {
				earlier := []byte("an earlier job's output")
				if _, err := e.s3.Client.PutObject(ctx, e.s3.Name, final, bytes.NewReader(earlier), int64(len(earlier)), minio.PutObjectOptions{}); err != nil {
					t.Fatal(err)
				}
				if !tc.carry {
					want = e.objectSHA256(final)
				}
			}
			v := e.drive(e.runner(func(s *runner.Settings) { s.UploadTimeout = time.Second }), id, 60*time.Second)
			if v.Status != schema.StatusDeadLetter || v.LastError == nil || v.LastError.Code != "storage_timeout" {
				t.Fatalf("%s: status %s err %+v, want dead_letter / storage_timeout", tc.name, v.Status, v.LastError)
			}
			if got := e.objectSHA256(final); got != want {
				t.Fatalf("%s: final key %s, want %s", tc.name, got, want)
			}
			for obj := range e.s3.Client.ListObjects(ctx, e.s3.Name, minio.ListObjectsOptions{Prefix: "out/" + id + "/", Recursive: true}) {
				if obj.Err != nil || obj.Key != final {
					t.Fatalf("%s: left behind: %s %v", tc.name, obj.Key, obj.Err)
				}
			}
		}
	})
}
