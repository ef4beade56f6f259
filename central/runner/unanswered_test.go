package runner_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
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

// heldGate stands in front of the fault proxy for storage that never
// answers one write of a promotion: the first request hold picks is held
// until the client gives up, then the server does what then says with it
// (nil: drops it; fwd carries it out). Requests outside the staging
// directories that come after it wait until the server is done with it,
// as one server would order them.
type heldGate struct {
	URL string

	mu   sync.Mutex
	held chan struct{} // closed once the held write is dealt with
}

func (e *env) heldGate(hold func(*http.Request) bool, then func(r *http.Request, fwd http.Handler)) *heldGate {
	u, err := url.Parse(e.proxy.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	g := &heldGate{}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the signed Host header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		held := g.held
		first := held == nil && hold(r)
		if first {
			held = make(chan struct{})
			g.held = held
		}
		g.mu.Unlock()
		switch {
		case first:
			// The client sends the whole body (a part list, the file)
			// before it waits for the answer: kept for a late write.
			body, err := io.ReadAll(r.Body)
			<-r.Context().Done()
			if then != nil && err == nil {
				r = r.WithContext(context.WithoutCancel(r.Context()))
				r.Body = io.NopCloser(bytes.NewReader(body))
				then(r, rp)
			}
			close(held)
			return
		case held != nil && !staging(r):
			<-held
		}
		rp.ServeHTTP(w, r)
	}))
	e.t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

func staging(r *http.Request) bool { return strings.Contains(r.URL.Path, ".euterpe-attempt-") }

// oneCopy is a promotion's CopyObject request.
func oneCopy(r *http.Request) bool { return r.Header.Get("X-Amz-Copy-Source") != "" }

// completion completes a multipart write (a copy in parts) of a final key.
func completion(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Query().Has("uploadId") && !staging(r)
}

// reupload sends the local file to a final key in place of a copy.
func reupload(r *http.Request) bool {
	return r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") == "" && !staging(r)
}

// What the server does with the held write once the client gave up.
type lateWrite int

const (
	dropped lateWrite = iota
	carried
	// sameBytes: the write is dropped, and another writer (a job sharing
	// the prefix, a runner that names no attempt) puts the staged bytes at
	// the final key: the same ETag, written after the staged object.
	sameBytes
)

// TestUnansweredPromotionRemoved: a promotion write gets no answer within
// its bound (storage_timeout) and the job has no attempt left. Whether the
// server carried it out or not, the job leaves no output of its own: the
// final key written after the client gave up is removed (it was not among
// the keys known to be promoted), while an object there that this attempt
// did not write — an earlier job's the write never replaced, or one with
// the output's very bytes and ETag — is kept. Which is which is told by
// the attempt the object's metadata names, not by its ETag: a copy in
// parts has an ETag of its own (as any copy under SSE-KMS on S3), and is
// still removed, and so is a re-upload of the output in place of a refused
// copy. Fails without: the copy in parts stayed at its final key beside a
// dead_letter job, and the other writer's identical object was removed.
func TestUnansweredPromotionRemoved(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.putWAV("in/src.wav", 1)
		e.putFile("in/noise.wav", noiseWAV(t, 40)) // flac of it in 8 channels: 7.2 MB, two 5 MiB parts
		type promotion struct {
			src      string
			rends    []inbox.Rendition
			file     string // the output's file name
			partSize int64  // CopyPartSize; 0: the default
			deny     bool   // copies refused: the output is sent again instead
		}
		small := promotion{src: "in/src.wav", rends: oneOpus, file: "o.ogg"}
		parts := promotion{src: "in/noise.wav", rends: []inbox.Rendition{{Name: "o", Codec: "flac", Channels: 8}}, file: "o.flac", partSize: 5 << 20}
		resent := small
		resent.deny = true
		cases := []struct {
			name    string
			p       promotion
			hold    func(*http.Request) bool
			then    lateWrite
			earlier bool // an earlier job's object at the final key
		}{
			{name: "carried out", p: small, hold: oneCopy, then: carried},
			{name: "carried out over an earlier output", p: small, hold: oneCopy, then: carried, earlier: true},
			{name: "never carried out, an earlier output there", p: small, hold: oneCopy, then: dropped, earlier: true},
			{name: "same bytes written by another", p: small, hold: oneCopy, then: sameBytes},
			{name: "copy in parts carried out, a new ETag", p: parts, hold: completion, then: carried},
			{name: "re-upload carried out", p: resent, hold: reupload, then: carried},
		}
		for _, tc := range cases {
			var tmp, final string
			other := make(chan string, 1) // SHA-256 of what sameBytes wrote
			gate := e.heldGate(tc.hold, func(r *http.Request, fwd http.Handler) {
				switch tc.then {
				case carried:
					fwd.ServeHTTP(httptest.NewRecorder(), r)
					if tc.p.partSize != 0 && e.etag(final) == e.etag(tmp) {
						t.Errorf("%s: the copy in parts kept the staged ETag: the case proves nothing", tc.name)
					}
				case sameBytes:
					other <- e.putCopyOf(tmp, final)
				}
			})
			id := e.enqueue(tc.p.src, tc.p.rends, func(j *inbox.NewJob) {
				j.Output.Endpoint = gate.URL
				j.MaxAttempts = 1
			})
			final = "out/" + id + "/" + tc.p.file
			tmp = "out/" + id + "/.euterpe-attempt-" + id + "-1/" + tc.p.file
			want := "missing"
			if tc.earlier {
				earlier := []byte("an earlier job's output")
				if _, err := e.s3.Client.PutObject(ctx, e.s3.Name, final, bytes.NewReader(earlier), int64(len(earlier)), minio.PutObjectOptions{}); err != nil {
					t.Fatal(err)
				}
				if tc.then == dropped {
					want = e.objectSHA256(final)
				}
			}
			e.proxy.DenyCopies(tc.p.deny)
			copies := e.proxy.Copies()
			bound := time.Second
			if tc.p.partSize != 0 {
				// Megabytes staged and copied part by part, under -race.
				bound = 3 * time.Second
			}
			r := e.runner(func(s *runner.Settings) { s.UploadTimeout = bound })
			if tc.p.partSize != 0 {
				runner.SetCopyPartSize(r, tc.p.partSize)
			}
			v := e.drive(r, id, 60*time.Second)
			e.proxy.DenyCopies(false)
			if v.Status != schema.StatusDeadLetter || v.LastError == nil || v.LastError.Code != "storage_timeout" {
				t.Fatalf("%s: status %s err %+v, want dead_letter / storage_timeout", tc.name, v.Status, v.LastError)
			}
			if tc.p.partSize != 0 && e.proxy.Copies()-copies < 2 {
				t.Fatalf("%s: %d copy requests, want a copy in parts", tc.name, e.proxy.Copies()-copies)
			}
			if tc.then == sameBytes {
				select {
				case want = <-other:
				default:
					t.Fatalf("%s: the held copy never reached the server", tc.name)
				}
			}
			if got := e.objectSHA256(final); got != want {
				t.Fatalf("%s: final key %s, want %s", tc.name, got, want)
			}
			e.noStagedLeft(id, map[bool]int{true: 0, false: 1}[want == "missing"])
		}
	})
}

// etag is the ETag of key in the test bucket, "" when it cannot be read.
func (e *env) etag(key string) string {
	st, err := e.s3.Client.StatObject(context.Background(), e.s3.Name, key, minio.StatObjectOptions{})
	if err != nil {
		e.t.Errorf("stat %s: %v", key, err)
		return ""
	}
	return st.ETag
}

// putCopyOf writes src's bytes at dst with a plain upload, as another
// writer would (no metadata), checks that dst then has src's ETag, and
// returns their SHA-256 ("sha256:<hex>").
func (e *env) putCopyOf(src, dst string) string {
	ctx := context.Background()
	obj, err := e.s3.Client.GetObject(ctx, e.s3.Name, src, minio.GetObjectOptions{})
	if err != nil {
		e.t.Errorf("get %s: %v", src, err)
		return ""
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		e.t.Errorf("read %s: %v", src, err)
		return ""
	}
	if _, err := e.s3.Client.PutObject(ctx, e.s3.Name, dst, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		e.t.Errorf("put %s: %v", dst, err)
		return ""
	}
	if a, b := e.etag(src), e.etag(dst); a != b {
		e.t.Errorf("%s has ETag %s, %s %s: want the same", dst, b, src, a)
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
