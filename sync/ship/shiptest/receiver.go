package shiptest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Receiver stands in for central's sync ingest in the edge's tests, until
// they run against the real central: it checks what central checks (signature over the gzip bytes, timestamp window,
// the decompression cap, the batch's edge id against the header's) with
// central/webhook and sync/wire, and records what it accepted by event id.
type Receiver struct {
	URL string
	// CountOnly, set before the first request, keeps only the number of
	// events received (benchmarks of a million events need no copies).
	CountOnly bool
	srv       *httptest.Server
	secret    []byte

	mu       sync.Mutex
	events   map[string]wire.Event
	arrivals []wire.Event // every accepted event, duplicates included, in arrival order
	gaps     map[string]wire.Gap
	batches  []int // compressed size of each accepted batch
	statuses []wire.Status
	requests int
	received int // CountOnly: events received
	// hook, when set, may answer request n (from 1) itself.
	hook func(w http.ResponseWriter, r *http.Request, n int) bool
}

// NewReceiver starts a receiver verifying with secret, stopped when t ends.
func NewReceiver(t testing.TB, secret []byte) *Receiver {
	rc := Start(secret)
	t.Cleanup(rc.Close)
	return rc
}

// Start starts a receiver verifying with secret; Close stops it.
func Start(secret []byte) *Receiver {
	rc := &Receiver{secret: secret, events: map[string]wire.Event{}, gaps: map[string]wire.Gap{}}
	rc.srv = httptest.NewServer(rc)
	rc.URL = rc.srv.URL
	return rc
}

// Close stops the receiver.
func (rc *Receiver) Close() { rc.srv.Close() }

// CountPath answers GET with Count, for a receiver in another process.
const CountPath = "/test/count"

// SetHook installs (nil removes) a hook that may answer request n (from 1)
// itself by returning true.
func (rc *Receiver) SetHook(h func(w http.ResponseWriter, r *http.Request, n int) bool) {
	rc.mu.Lock()
	rc.hook = h
	rc.mu.Unlock()
}

// refusal is the code central refuses an undecodable body with.
func refusal(err error) string {
	if errors.Is(err, wire.ErrUnsupported) {
		return wire.CodeUnsupportedFormat
	}
	return wire.CodeInvalidBatch
}

// Refuse answers with central's error body.
func Refuse(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"refused"}}`))
}

// ServeHTTP verifies and records a batch or a heartbeat.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.requests++
	n, hook := rc.requests, rc.hook
	rc.mu.Unlock()
	if hook != nil && hook(w, r, n) {
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == CountPath {
		_, _ = w.Write([]byte(strconv.Itoa(rc.Count())))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, wire.MaxCompressedBytes+1))
	if err != nil || len(body) > wire.MaxCompressedBytes {
		Refuse(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
		return
	}
	if r.Header.Get("Content-Encoding") != "gzip" {
		Refuse(w, http.StatusBadRequest, wire.CodeInvalidBatch)
		return
	}
	if _, err := webhook.Verify([][]byte{rc.secret}, r.Header, body, time.Now()); err != nil {
		if errors.Is(err, webhook.ErrStaleTimestamp) {
			Refuse(w, http.StatusUnauthorized, wire.CodeClockSkew) // net/http adds the Date header
			return
		}
		Refuse(w, http.StatusUnauthorized, wire.CodeUnauthorized)
		return
	}
	raw, err := wire.Decompress(body, wire.MaxBodyBytes)
	if errors.Is(err, wire.ErrTooLarge) {
		Refuse(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge)
		return
	} else if err != nil {
		Refuse(w, http.StatusBadRequest, wire.CodeInvalidBatch)
		return
	}
	switch r.URL.Path {
	case wire.HeartbeatPath:
		st, err := wire.DecodeStatus(raw)
		if err != nil || st.EdgeID != r.Header.Get(wire.HeaderEdgeID) {
			Refuse(w, http.StatusBadRequest, refusal(err))
			return
		}
		rc.mu.Lock()
		rc.statuses = append(rc.statuses, st)
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case wire.BatchPath:
		b, err := wire.Decode(raw)
		if err != nil || b.EdgeID != r.Header.Get(wire.HeaderEdgeID) {
			Refuse(w, http.StatusBadRequest, refusal(err))
			return
		}
		var res wire.BatchResult
		rc.mu.Lock()
		if rc.CountOnly {
			rc.received += len(b.Events)
			res.Accepted = len(b.Events)
			b.Events = nil
		}
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

// Count is how many distinct events were accepted (with CountOnly, how
// many were received).
func (rc *Receiver) Count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.CountOnly {
		return rc.received
	}
	return len(rc.events)
}

// Events are the accepted events by event id.
func (rc *Receiver) Events() map[string]wire.Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]wire.Event, len(rc.events))
	for k, v := range rc.events {
		out[k] = v
	}
	return out
}

// Arrivals are the accepted events in arrival order, resent ones again.
func (rc *Receiver) Arrivals() []wire.Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]wire.Event(nil), rc.arrivals...)
}

// Gaps are the reported gaps by gap id.
func (rc *Receiver) Gaps() map[string]wire.Gap {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string]wire.Gap, len(rc.gaps))
	for k, v := range rc.gaps {
		out[k] = v
	}
	return out
}

// Batches are the compressed sizes of the accepted batches.
func (rc *Receiver) Batches() []int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]int(nil), rc.batches...)
}

// Statuses are the accepted heartbeats.
func (rc *Receiver) Statuses() []wire.Status {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]wire.Status(nil), rc.statuses...)
}
