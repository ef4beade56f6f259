package e2e

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// holdProxy forwards the edge's requests to the real central unchanged,
// except that central's answer to the first batch it stores is withheld:
// central has committed that batch, the edge never learns it, and held is
// closed so the test can kill the edge in exactly that window.
type holdProxy struct {
	URL  string
	held chan struct{}

	mu     sync.Mutex
	stored int // batches central answered 200
}

func newHoldProxy(t *testing.T, target string) *holdProxy {
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &holdProxy{held: make(chan struct{})}
	release := make(chan struct{})
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0) // central down: the edge sees 502 and backs off
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != wire.BatchPath {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r) // central stores the batch (or not) and answers
		p.mu.Lock()
		hold := false
		if rec.Code == http.StatusOK {
			p.stored++
			hold = p.stored == 1
		}
		p.mu.Unlock()
		if !hold {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
			return
		}
		close(p.held)
		select { // the answer never reaches the edge
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: no handler outlives the test
	p.URL = srv.URL
	return p
}
