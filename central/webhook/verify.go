package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Errors returned by Verify; match them with errors.Is. Messages name the
// header at fault but never echo a secret or a signature.
var (
	ErrMissingHeader  = errors.New("webhook: missing header")
	ErrBadTimestamp   = errors.New("webhook: malformed timestamp")
	ErrStaleTimestamp = errors.New("webhook: timestamp outside the allowed skew")
	ErrBadNonce       = errors.New("webhook: malformed nonce")
	ErrBadSignature   = errors.New("webhook: signature does not match")
	ErrReplayedNonce  = errors.New("webhook: nonce already seen (replay)")
	ErrNonceStoreFull = errors.New("webhook: nonce store is full")
	// ErrEventIDMismatch: the signed body's event_id differs from the
	// x-euterpe-event-id header. The header is not signed; receivers dedupe
	// on the id, so a rewritten header could make a genuine event look
	// like one already handled.
	ErrEventIDMismatch = errors.New("webhook: " + HeaderEventID + " does not match the signed body's event_id")
)

// Defaults of a zero Verifier.
const (
	DefaultSkew = 5 * time.Minute
	// DefaultNonceWindow covers a timestamp's whole acceptance range
	// (-skew..+skew), so a nonce is remembered as long as its request
	// could still pass the timestamp check.
	DefaultNonceWindow = 2 * DefaultSkew
	maxNonceLen        = 128
	maxSignatures      = 8
)

// Verifier checks signed requests. The zero value is not usable: Nonces must
// be set (NewVerifier does it); a Verifier is safe for concurrent use when its
// NonceStore is.
type Verifier struct {
	// Secrets are the receiver's secrets; during a rotation both the new
	// and the old one, in any order.
	Secrets [][]byte
	// Skew is the largest accepted |now - timestamp|; 0 means DefaultSkew.
	Skew time.Duration
	// NonceWindow is how long a nonce is remembered; 0 means twice Skew.
	// It must be at least 5 minutes and at least Skew; a nonce is in any case
	// remembered until its timestamp can no longer pass the skew check.
	NonceWindow time.Duration
	// Nonces remembers nonces of verified requests.
	Nonces NonceStore
}

// NewVerifier returns a Verifier with the default skew and window and an
// in-memory nonce store bounded to DefaultNonceCapacity entries.
func NewVerifier(secrets ...[]byte) *Verifier {
	return &Verifier{Secrets: secrets, Nonces: NewMemoryNonces(DefaultNonceCapacity)}
}

// Delivery is what a verified request says about itself.
type Delivery struct {
	// EventID is the signed body's event_id when the body is a JSON object
	// with one (Verify refuses a header that differs), else the
	// x-euterpe-event-id header.
	EventID   string
	Nonce     string
	Timestamp time.Time
}

// defaultNonces is made on first use: every program that links this
// package (the edge signs its sync uploads with it) would otherwise carry
// a full nonce ring it never uses, resident and scanned by every GC.
var defaultNonces = sync.OnceValue(func() *MemoryNonces { return NewMemoryNonces(DefaultNonceCapacity) })

// Verify checks headers and body against secrets at now with the default
// skew (±5 min) and a process-wide in-memory nonce store (10 min window).
// Receivers running several replicas should use a Verifier with a shared
// NonceStore instead.
func Verify(secrets [][]byte, headers http.Header, body []byte, now time.Time) (Delivery, error) {
	v := Verifier{Secrets: secrets, Nonces: defaultNonces()}
	return v.Verify(context.Background(), headers, body, now)
}

// Verify checks, in order: the four headers are present, the timestamp is
// within the skew of now, one of the v1 signatures matches one of the secrets
// (constant-time), the event id header equals the body's event_id when the
// body is a JSON object that has one, and the nonce has not been seen in the
// window. The nonce is recorded only after the signature matched, so forged
// requests cannot fill the store, and only for a request that passed every
// other check, so a tampered copy does not shut out the genuine one.
func (v *Verifier) Verify(ctx context.Context, headers http.Header, body []byte, now time.Time) (Delivery, error) {
	var d Delivery
	sig, ts, nonce, eventID := headers.Get(HeaderSignature), headers.Get(HeaderTimestamp), headers.Get(HeaderNonce), headers.Get(HeaderEventID)
	for _, p := range [][2]string{{HeaderSignature, sig}, {HeaderTimestamp, ts}, {HeaderNonce, nonce}, {HeaderEventID, eventID}} {
		if strings.TrimSpace(p[1]) == "" {
			return d, fmt.Errorf("%w: %s", ErrMissingHeader, p[0])
		}
	}
	secrets := nonEmpty(v.Secrets)
	if len(secrets) == 0 {
		return d, ErrNoSecret
	}
	if len(nonce) > maxNonceLen || strings.ContainsAny(nonce, " .\t\r\n") {
		return d, fmt.Errorf("%w: at most %d characters, no spaces or dots", ErrBadNonce, maxNonceLen)
	}
	unix, err := parseTimestamp(ts)
	if err != nil {
		return d, err
	}
	skew := v.Skew
	if skew <= 0 {
		skew = DefaultSkew
	}
	at := time.Unix(unix, 0)
	if diff := now.Sub(at); diff > skew || diff < -skew {
		return d, fmt.Errorf("%w: %s off by %s, allowed ±%s", ErrStaleTimestamp, HeaderTimestamp, diff.Round(time.Second), skew)
	}
	if !matches(sig, secrets, ts, nonce, body) {
		return d, ErrBadSignature
	}
	signedID, ok, err := bodyEventID(body)
	if err != nil {
		return d, err
	}
	if ok && signedID != eventID {
		return d, ErrEventIDMismatch
	}
	window := v.NonceWindow
	if window <= 0 {
		window = 2 * skew
	}
	if window < 5*time.Minute {
		window = 5 * time.Minute
	}
	if window < skew {
		window = skew
	}
	if v.Nonces == nil {
		return d, fmt.Errorf("%w: Verifier has no NonceStore", ErrReplayedNonce)
	}
	// The request passes the timestamp check until at+skew (inclusive), which
	// is later than now+window when the sender's clock runs ahead and the
	// window is short: remember the nonce at least that long, or a captured
	// copy could be replayed once the window ended.
	expires := now.Add(window)
	if last := at.Add(skew + time.Second); last.After(expires) {
		expires = last
	}
	if err := v.Nonces.Remember(ctx, nonce, expires, now); err != nil {
		return d, err
	}
	return Delivery{EventID: eventID, Nonce: nonce, Timestamp: at}, nil
}

// bodyEventID reads the top-level "event_id" of a JSON object body; ok is
// false when the body is not a JSON object or has no such field. A present
// event_id that is not a string cannot match a header and is refused.
func bodyEventID(body []byte) (id string, ok bool, err error) {
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return "", false, nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return "", false, nil
	}
	raw, ok := fields["event_id"]
	if !ok {
		return "", false, nil
	}
	if json.Unmarshal(raw, &id) != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", false, fmt.Errorf("%w: the body's event_id is not a string", ErrEventIDMismatch)
	}
	return id, true, nil
}

func parseTimestamp(ts string) (int64, error) {
	if len(ts) == 0 || len(ts) > 12 {
		return 0, fmt.Errorf("%w: %s must be Unix seconds", ErrBadTimestamp, HeaderTimestamp)
	}
	for _, c := range ts {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %s must be Unix seconds", ErrBadTimestamp, HeaderTimestamp)
		}
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s must be Unix seconds", ErrBadTimestamp, HeaderTimestamp)
	}
	return n, nil
}

// matches reports whether any v1 signature in header equals the HMAC of any
// secret. Every candidate is compared with hmac.Equal; unknown versions are
// skipped so a future scheme can be sent alongside v1.
func matches(header string, secrets [][]byte, ts, nonce string, body []byte) bool {
	var got [][]byte
	for i, f := range strings.Fields(header) {
		if i >= maxSignatures {
			break
		}
		ver, hexsig, ok := strings.Cut(f, "=")
		if !ok || ver != SignatureVersion {
			continue
		}
		b, err := hex.DecodeString(hexsig)
		if err != nil || len(b) == 0 {
			continue
		}
		got = append(got, b)
	}
	ok := false
	for _, s := range secrets {
		want := mac(s, ts, nonce, body)
		for _, g := range got {
			if hmac.Equal(want, g) {
				ok = true // keep comparing: time does not depend on which matched
			}
		}
	}
	return ok
}

func nonEmpty(in [][]byte) [][]byte {
	out := make([][]byte, 0, len(in))
	for _, s := range in {
		if len(s) > 0 {
			out = append(out, s)
		}
	}
	return out
}
