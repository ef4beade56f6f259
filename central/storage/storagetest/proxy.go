// Package storagetest puts a fault-injecting reverse proxy in front of the
// real S3-compatible test server. The proxy stands in for a flaky network
// path (gateways answering 503 or 429, a server that stops declaring
// Content-Length); the storage behind it stays real. (An endpoint that
// takes connections and never answers is testsvc.SilentServer.)
package storagetest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"
)

// Proxy forwards to an upstream S3 endpoint unless told to fail.
type Proxy struct {
	URL string // endpoint to give clients: http://127.0.0.1:port

	mu          sync.Mutex
	faults      []int // statuses to answer with, one per request, in order
	stripLength bool
	methods     map[string]int
	// denyCopies answers every server-side copy with 403 AccessDenied:
	// credentials that may write but not read.
	denyCopies bool
	copies     int
	// slowCopies is how many of the next server-side copies wait slowCopy
	// before reaching the server: storage slower than the caller's bound.
	slowCopies int
	slowCopy   time.Duration
	// slowStats is how many of the next HEAD requests (an object's stat)
	// wait slowStat before reaching the server.
	slowStats int
	slowStat  time.Duration
	// loseInitiations is how many of the next multipart initiations reach
	// the server while their answers never reach the client.
	loseInitiations int
	// lost has one channel per lost initiation, closed once the server
	// has answered it.
	lost []chan struct{}
	// beforeGets is how many of the next object downloads run beforeGet
	// before they are forwarded.
	beforeGets int
	beforeGet  func()
}

// New starts a proxy to upstream (e.g. testsvc.S3Bucket.Endpoint), closed
// when the test ends.
func New(t testing.TB, upstream string) *Proxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{methods: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	// SigV4 signs the Host header: keep the one the client sent.
	rp.ModifyResponse = func(r *http.Response) error {
		p.mu.Lock()
		strip := p.stripLength
		p.mu.Unlock()
		if strip && r.Request.Method == http.MethodGet {
			r.ContentLength = -1
			r.Header.Del("Content-Length")
		}
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.methods[r.Method]++
		status := 0
		if len(p.faults) > 0 {
			status, p.faults = p.faults[0], p.faults[1:]
		}
		isCopy := r.Header.Get("X-Amz-Copy-Source") != ""
		if isCopy {
			p.copies++
		}
		deny := isCopy && p.denyCopies
		var delay time.Duration
		if isCopy && p.slowCopies > 0 {
			p.slowCopies--
			delay = p.slowCopy
		}
		if r.Method == http.MethodHead && p.slowStats > 0 {
			p.slowStats--
			delay = p.slowStat
		}
		_, initiation := r.URL.Query()["uploads"]
		lose := initiation && r.Method == http.MethodPost && p.loseInitiations > 0
		var created chan struct{}
		if lose {
			p.loseInitiations--
			created = make(chan struct{})
			p.lost = append(p.lost, created)
		}
		lost := p.lost
		var before func()
		if r.Method == http.MethodGet && r.URL.RawQuery == "" && p.beforeGets > 0 {
			p.beforeGets--
			before = p.beforeGet
		}
		p.mu.Unlock()
		if before != nil {
			before()
		}
		if lose {
			// The upload is created; its ID is held back until the
			// client gives up waiting for it.
			rp.ServeHTTP(httptest.NewRecorder(), r.WithContext(context.WithoutCancel(r.Context())))
			close(created)
			<-r.Context().Done()
			return
		}
		if initiation && r.Method == http.MethodGet {
			// A listing of the multipart uploads sees the lost ones: they
			// reached the server before their client gave up, however
			// late the forwarding ran on a loaded machine.
			if !waitAll(r.Context(), lost) {
				return
			}
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				// The client gave up first: the request never reaches
				// the server.
				t.Stop()
				return
			}
		}
		if deny {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`))
			return
		}
		if status != 0 {
			if status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, http.StatusText(status), status)
			return
		}
		if f, ok := w.(http.Flusher); ok && r.Method == http.MethodGet {
			defer f.Flush()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// waitAll waits until every channel in chs is closed or ctx ends, and
// reports whether they all were.
func waitAll(ctx context.Context, chs []chan struct{}) bool {
	for _, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Fail makes the next len(statuses) requests answer with those statuses.
func (p *Proxy) Fail(statuses ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, statuses...)
}

// Pending is how many injected faults are still to be served.
func (p *Proxy) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.faults)
}

// StripLength makes GET responses stream without Content-Length.
func (p *Proxy) StripLength(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stripLength = on
}

// DenyCopies makes every server-side copy (a request with
// X-Amz-Copy-Source) answer 403 AccessDenied, as for output credentials
// that may write the prefix but not read it.
func (p *Proxy) DenyCopies(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.denyCopies = on
}

// SlowCopies makes the next n server-side copies wait d before they are
// forwarded; one whose client gives up first never reaches the server.
func (p *Proxy) SlowCopies(n int, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowCopies, p.slowCopy = n, d
}

// SlowStats makes the next n HEAD requests (stats) wait d before they are
// forwarded; one whose client gives up first never reaches the server.
func (p *Proxy) SlowStats(n int, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.slowStats, p.slowStat = n, d
}

// BeforeGets makes the next n object downloads (GETs without a query)
// wait for fn before they are forwarded: for changing the object between
// a client's stat of it and its download.
func (p *Proxy) BeforeGets(n int, fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beforeGets, p.beforeGet = n, fn
}

// LoseInitiations makes the next n multipart initiations reach the server
// while their answers are held until the client gives up: an upload the
// client never learns the ID of.
func (p *Proxy) LoseInitiations(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseInitiations = n
}

// WaitLostInitiations waits until every initiation lost so far has been
// answered by the server, so the upload it created can be listed there.
func (p *Proxy) WaitLostInitiations(ctx context.Context) error {
	p.mu.Lock()
	lost := p.lost
	p.mu.Unlock()
	if !waitAll(ctx, lost) {
		return fmt.Errorf("lost initiations not created upstream: %w", ctx.Err())
	}
	return nil
}

// Copies is how many server-side copy requests reached the proxy.
func (p *Proxy) Copies() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.copies
}

// Requests is how many requests with method reached the proxy.
func (p *Proxy) Requests(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.methods[method]
}
