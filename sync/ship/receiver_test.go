package ship

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// receiver stands in for central's ingest in these unit tests: it checks
// what central checks (signature over the gzip bytes, timestamp window,
// the decompression cap, the batch's edge id against the header's) with
// central/webhook and sync/wire, and records what it accepted by event id.
type receiver struct {
	srv    *httptest.Server
	secret []byte

	mu       sync.Mutex
	events   map[string]wire.Event
	arrivals []wire.Event // every accepted event, duplicates included, in arrival order
	gaps     map[string]wire.Gap
	batches  []int // compressed size of each accepted batch
	statuses []wire.Status
	requests int
	// hook, when set, may answer request n (from 1) itself.
	hook func(w http.ResponseWriter, r *http.Request, n int) bool
}

func newReceiver(t *testing.T, secret []byte) *receiver {
	rc := &receiver{secret: secret, events: map[string]wire.Event{}, gaps: map[string]wire.Gap{}}
	rc.srv = httptest.NewServer(rc)
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) setHook(h func(w http.ResponseWriter, r *http.Request, n int) bool) {
	rc.mu.Lock()
	rc.hook = h
	rc.mu.Unlock()
}

func refuse(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"refused"}}`))
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.requests++
	n, hook := rc.requests, rc.hook
	rc.mu.Unlock()
	if hook != nil && hook(w, r, n) {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, wire.MaxCompressedBytes+1))
	if err != nil || len(body) > wire.MaxCompressedBytes {
		refuse(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
		return
	}
	if r.Header.Get("Content-Encoding") != "gzip" {
		refuse(w, http.StatusBadRequest, wire.CodeInvalidBatch)
		return
	}
	if _, err := webhook.Verify([][]byte{rc.secret}, r.Header, body, time.Now()); err != nil {
		if errors.Is(err, webhook.ErrStaleTimestamp) {
			refuse(w, http.StatusUnauthorized, wire.CodeClockSkew) // net/http adds the Date header
			return
		}
		refuse(w, http.StatusUnauthorized, wire.CodeUnauthorized)
		return
	}
	raw, err := wire.Decompress(body, wire.MaxBodyBytes)
	if errors.Is(err, wire.ErrTooLarge) {
		refuse(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
		return
	} else if err != nil {
		refuse(w, http.StatusBadRequest, wire.CodeInvalidBatch)
		return
	}
	switch r.URL.Path {
	case wire.HeartbeatPath:
		st, err := wire.DecodeStatus(raw)
		if err != nil || st.EdgeID != r.Header.Get(wire.HeaderEdgeID) {
			refuse(w, http.StatusBadRequest, wire.CodeInvalidBatch)
			return
		}
		rc.mu.Lock()
		rc.statuses = append(rc.statuses, st)
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case wire.BatchPath:
		b, err := wire.Decode(raw)
		if err != nil || b.EdgeID != r.Header.Get(wire.HeaderEdgeID) {
			refuse(w, http.StatusBadRequest, wire.CodeInvalidBatch)
			return
		}
		var res wire.BatchResult
		rc.mu.Lock()
		for _, e := range b.Events {
			if _, dup := rc.events[e.EventID]; dup {
				res.Duplicates++
			} else {
				res.Accepted++
				rc.events[e.EventID] = e
			}
			rc.arrivals = append(rc.arrivals, e)
		}
		for _, g := range b.Dropped {
			rc.gaps[g.GapID] = g
			res.Gaps++
		}
		rc.batches = append(rc.batches, len(body))
		rc.mu.Unlock()
		_ = json.NewEncoder(w).Encode(res)
	default:
		http.NotFound(w, r)
	}
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.events)
}
