package webhook

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func signed(t *testing.T, now time.Time, body []byte, secrets ...string) http.Header {
	t.Helper()
	var ks [][]byte
	for _, s := range secrets {
		ks = append(ks, []byte(s))
	}
	h, err := NewHeaders(now, "evt_1", body, ks...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestVerify(t *testing.T) {
	now := time.Unix(1700000000, 0)
	body := []byte(`{"event_id":"evt_1","status":"processing"}`)
	cases := []struct {
		name    string
		secrets []string // receiver's
		mutate  func(h http.Header, body []byte) []byte
		at      time.Time
		want    error
	}{
		{name: "valid", secrets: []string{"k"}},
		{name: "receiver holds old and new", secrets: []string{"other", "k"}},
		{name: "wrong secret", secrets: []string{"nope"}, want: ErrBadSignature},
		{name: "no secret", secrets: nil, want: ErrNoSecret},
		{name: "tampered body", secrets: []string{"k"}, mutate: func(_ http.Header, b []byte) []byte {
			return append([]byte{}, append(b[:len(b)-1:len(b)-1], ' ', '}')...)
		}, want: ErrBadSignature},
		{name: "tampered timestamp", secrets: []string{"k"}, mutate: func(h http.Header, b []byte) []byte {
			h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
			return b
		}, want: ErrBadSignature},
		{name: "tampered nonce", secrets: []string{"k"}, mutate: func(h http.Header, b []byte) []byte {
			h.Set(HeaderNonce, "00000000000000000000000000000000")
			return b
		}, want: ErrBadSignature},
		{name: "uppercase hex rejected as different version", secrets: []string{"k"}, mutate: func(h http.Header, b []byte) []byte {
			h.Set(HeaderSignature, "v2="+h.Get(HeaderSignature)[3:])
			return b
		}, want: ErrBadSignature},
		{name: "stale timestamp", secrets: []string{"k"}, at: now.Add(5*time.Minute + time.Second), want: ErrStaleTimestamp},
		{name: "future timestamp", secrets: []string{"k"}, at: now.Add(-5*time.Minute - time.Second), want: ErrStaleTimestamp},
		{name: "edge of window", secrets: []string{"k"}, at: now.Add(5 * time.Minute)},
		{name: "malformed timestamp", secrets: []string{"k"}, mutate: func(h http.Header, b []byte) []byte {
			h.Set(HeaderTimestamp, "-17")
			return b
		}, want: ErrBadTimestamp},
		{name: "missing signature", secrets: []string{"k"}, mutate: func(h http.Header, b []byte) []byte {
			h.Del(HeaderSignature)
			return b
		}, want: ErrMissingHeader},
		{name: "missing event id", secrets: []string{"k"}, mutate: func(h http.Header, b []byte) []byte {
			h.Del(HeaderEventID)
			return b
		}, want: ErrMissingHeader},
		{name: "missing nonce", secrets: []string{"k"}, mutate: func(h http.Header, b []byte) []byte {
			h.Del(HeaderNonce)
			return b
		}, want: ErrMissingHeader},
		{name: "malformed nonce", secrets: []string{"k"}, mutate: func(h http.Header, b []byte) []byte {
			h.Set(HeaderNonce, "a.b")
			return b
		}, want: ErrBadNonce},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := signed(t, now, body, "k")
			b := body
			if c.mutate != nil {
				b = c.mutate(h, append([]byte{}, body...))
			}
			at := c.at
			if at.IsZero() {
				at = now
			}
			var ks [][]byte
			for _, s := range c.secrets {
				ks = append(ks, []byte(s))
			}
			v := NewVerifier(ks...)
			d, err := v.Verify(context.Background(), h, b, at)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if c.want == nil && (d.EventID != "evt_1" || !d.Timestamp.Equal(now)) {
				t.Fatalf("delivery %+v", d)
			}
		})
	}
}

func TestVerifyRotationEitherSecret(t *testing.T) {
	now := time.Now()
	body := []byte("{}")
	h := signed(t, now, body, "new", "old")
	for _, rs := range []string{"new", "old"} {
		if _, err := NewVerifier([]byte(rs)).Verify(context.Background(), h, body, now); err != nil {
			t.Fatalf("receiver with %s: %v", rs, err)
		}
	}
	if _, err := NewVerifier([]byte("older")).Verify(context.Background(), h, body, now); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("third secret: %v", err)
	}
}

func TestVerifyReplayedNonce(t *testing.T) {
	now := time.Now()
	body := []byte(`{"a":1}`)
	h := signed(t, now, body, "k")
	v := NewVerifier([]byte("k"))
	ctx := context.Background()
	if _, err := v.Verify(ctx, h, body, now); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, h, body, now.Add(4*time.Minute)); !errors.Is(err, ErrReplayedNonce) {
		t.Fatalf("replay: %v", err)
	}
	// A bad signature never enters the store, so it cannot block the real one.
	h2 := signed(t, now, body, "k")
	forged := h2.Clone()
	forged.Set(HeaderSignature, "v1=00")
	if _, err := v.Verify(ctx, forged, body, now); !errors.Is(err, ErrBadSignature) {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, h2, body, now); err != nil {
		t.Fatalf("genuine after forged: %v", err)
	}
	// Package-level Verify has its own store too.
	h3 := signed(t, now, body, "k")
	if _, err := Verify([][]byte{[]byte("k")}, h3, body, now); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify([][]byte{[]byte("k")}, h3, body, now); !errors.Is(err, ErrReplayedNonce) {
		t.Fatalf("package Verify replay: %v", err)
	}
}

func TestVerifyConcurrentReplayOnlyOnePasses(t *testing.T) {
	now := time.Now()
	body := []byte("x")
	h := signed(t, now, body, "k")
	v := NewVerifier([]byte("k"))
	var ok atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := v.Verify(context.Background(), h, body, now); err == nil {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 {
		t.Fatalf("%d verifications passed, want 1", ok.Load())
	}
}

func TestMemoryNoncesBoundedAndExpiring(t *testing.T) {
	ctx := context.Background()
	m := NewMemoryNonces(3)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if err := m.Remember(ctx, strconv.Itoa(i), t0.Add(time.Minute), t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Remember(ctx, "x", t0.Add(time.Minute), t0); !errors.Is(err, ErrNonceStoreFull) {
		t.Fatalf("full: %v", err)
	}
	if err := m.Remember(ctx, "1", t0.Add(time.Minute), t0.Add(30*time.Second)); !errors.Is(err, ErrReplayedNonce) {
		t.Fatalf("replay: %v", err)
	}
	t1 := t0.Add(time.Minute)
	if err := m.Remember(ctx, "1", t1.Add(time.Minute), t1); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if m.Len() != 1 {
		t.Fatalf("len %d after expiry, want 1", m.Len())
	}
}

func TestSeenEvents(t *testing.T) {
	s := NewSeenEvents(2, time.Hour)
	t0 := time.Unix(0, 0)
	if !s.First("a", t0) || s.First("a", t0.Add(time.Minute)) {
		t.Fatal("a")
	}
	if !s.First("b", t0) || !s.First("c", t0) { // c evicts a (capacity 2)
		t.Fatal("b c")
	}
	if !s.First("a", t0.Add(time.Minute)) {
		t.Fatal("a after eviction")
	}
	if !s.First("c", t0.Add(2*time.Hour)) {
		t.Fatal("c after ttl")
	}
}

// TestVerifyReplayOutlivesNonceWindow: a nonce is remembered as long as its
// request can still pass the timestamp check, whatever NonceWindow says.
// A request signed by a clock running ahead of the receiver's passes the
// skew check until its timestamp plus Skew; a window shorter than that
// (NonceWindow = Skew, which the field allows) must not let a captured copy
// be replayed once the window has passed but the timestamp still fits.
func TestVerifyReplayOutlivesNonceWindow(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"event_id":"evt_1"}`)
	cases := []struct {
		name     string
		ahead    time.Duration // sender clock ahead of the receiver's
		window   time.Duration
		replayAt time.Duration // after the first verification
	}{
		{"window equals skew, sender 4m ahead", 4 * time.Minute, 5 * time.Minute, 6 * time.Minute},
		{"window equals skew, sender 5m ahead", 5 * time.Minute, 5 * time.Minute, 9*time.Minute + 59*time.Second},
		{"default window, sender 5m ahead", 5 * time.Minute, 0, 9*time.Minute + 59*time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := signed(t, now.Add(c.ahead), body, "k")
			v := &Verifier{Secrets: [][]byte{[]byte("k")}, Skew: 5 * time.Minute, NonceWindow: c.window, Nonces: NewMemoryNonces(16)}
			if _, err := v.Verify(context.Background(), h, body, now); err != nil {
				t.Fatalf("first: %v", err)
			}
			if _, err := v.Verify(context.Background(), h, body, now.Add(c.replayAt)); !errors.Is(err, ErrReplayedNonce) {
				t.Fatalf("replay %s later: %v, want ErrReplayedNonce", c.replayAt, err)
			}
		})
	}
}

// expiryRecorder is a NonceStore that keeps the expiry it was asked for.
type expiryRecorder struct{ expires time.Time }

func (r *expiryRecorder) Remember(_ context.Context, _ string, expires, _ time.Time) error {
	r.expires = expires
	return nil
}

// TestNonceRememberedAtLeastFiveMinutes: whatever Skew and NonceWindow
// say, a verified nonce is remembered for at least five minutes (contract
// §8), longer when the window or the skew asks for more.
func TestNonceRememberedAtLeastFiveMinutes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"event_id":"evt_1"}`)
	for _, c := range []struct {
		name         string
		skew, window time.Duration
		atLeast      time.Duration
	}{
		{"defaults", 0, 0, 2 * DefaultSkew},
		{"short skew and window", time.Minute, time.Minute, 5 * time.Minute},
		{"short skew, default window", 30 * time.Second, 0, 5 * time.Minute},
		{"default skew, window of a second", 0, time.Second, 5 * time.Minute},
		{"window longer than the floor", time.Minute, 7 * time.Minute, 7 * time.Minute},
		{"skew longer than the window", 10 * time.Minute, time.Minute, 10 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &expiryRecorder{}
			v := &Verifier{Secrets: [][]byte{[]byte("k")}, Skew: c.skew, NonceWindow: c.window, Nonces: rec}
			if _, err := v.Verify(context.Background(), signed(t, now, body, "k"), body, now); err != nil {
				t.Fatal(err)
			}
			if got := rec.expires.Sub(now); got < c.atLeast {
				t.Fatalf("nonce remembered for %s, want at least %s", got, c.atLeast)
			}
		})
	}
}

// The event id header is not signed: a receiver dedupes on Delivery.EventID,
// so Verify ties it to the signed body's event_id, and a rewritten header
// cannot pass a genuine event off as one already handled.
func TestVerifyEventIDHeaderMatchesSignedBody(t *testing.T) {
	now := time.Unix(1700000000, 0)
	cases := []struct {
		name   string
		body   string
		header string // sent x-euterpe-event-id; "" keeps the signed one
		want   error
		id     string
	}{
		{name: "unchanged header", body: `{"event_id":"evt_1","status":"processing"}`, id: "evt_1"},
		{name: "header rewritten", body: `{"event_id":"evt_1","status":"processing"}`, header: "evt_0", want: ErrEventIDMismatch},
		{name: "header of another event", body: `{"status":"processing","event_id":"evt_2"}`, want: ErrEventIDMismatch},
		{name: "escaped body id", body: `{"event_id":"evt\u005f1"}`, id: "evt_1"},
		{name: "body id not a string", body: `{"event_id":1}`, want: ErrEventIDMismatch},
		{name: "body id null", body: `{"event_id":null}`, want: ErrEventIDMismatch},
		{name: "object without event_id", body: `{"a":1}`, header: "anything", id: "anything"},
		{name: "nested event_id only", body: `{"events":[{"event_id":"evt_9"}]}`, id: "evt_1"},
		{name: "not JSON", body: "x", header: "anything", id: "anything"},
		{name: "JSON array", body: `[{"event_id":"evt_9"}]`, id: "evt_1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			h := signed(t, now, body, "k") // signs with header evt_1
			if c.header != "" {
				h.Set(HeaderEventID, c.header)
			}
			v := NewVerifier([]byte("k"))
			d, err := v.Verify(context.Background(), h, body, now)
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if c.want == nil && d.EventID != c.id {
				t.Fatalf("event id %q, want %q", d.EventID, c.id)
			}
			if c.want != nil && c.header != "" {
				// The refused copy left no nonce behind: the genuine
				// request, header intact, still passes.
				h.Set(HeaderEventID, "evt_1")
				if _, err := v.Verify(context.Background(), h, body, now); err != nil {
					t.Fatalf("genuine after tampered: %v", err)
				}
			}
		})
	}
}
