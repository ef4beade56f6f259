package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names, as the contract spells them. net/http canonicalises them on
// the wire (X-Euterpe-Signature); HTTP header names are case-insensitive.
const (
	HeaderSignature = "x-euterpe-signature"
	HeaderTimestamp = "x-euterpe-timestamp"
	HeaderNonce     = "x-euterpe-nonce"
	HeaderEventID   = "x-euterpe-event-id"
)

// SignatureVersion prefixes every signature ("v1=<hex>").
const SignatureVersion = "v1"

// MaxSecrets is how many secrets one request is signed with: the current one
// and, during a rotation, the previous one.
const MaxSecrets = 2

// ErrNoSecret is returned when there is no usable secret to sign or verify with.
var ErrNoSecret = errors.New("webhook: no signing secret")

// Sign returns "v1=<lowercase hex>" of HMAC-SHA256(secret,
// timestamp + "." + nonce + "." + body), timestamp in Unix seconds.
func Sign(secret []byte, timestamp int64, nonce string, body []byte) string {
	return signString(secret, strconv.FormatInt(timestamp, 10), nonce, body)
}

func signString(secret []byte, timestamp, nonce string, body []byte) string {
	return SignatureVersion + "=" + hex.EncodeToString(mac(secret, timestamp, nonce, body))
}

func mac(secret []byte, timestamp, nonce string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write([]byte(nonce))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// NewNonce returns 16 random bytes as 32 lowercase hex characters.
func NewNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("webhook: nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// NewSecret returns a fresh webhook secret: "whsec_" and 32 random bytes in
// unpadded base64url. The whole string, as UTF-8 bytes, is the HMAC key.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("webhook: secret: %w", err)
	}
	return "whsec_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// NewHeaders signs body for one delivery attempt at now with up to
// MaxSecrets secrets (current first) and returns the four headers. eventID is
// the stable id of what is being delivered (the outbox event_id, or the id of
// a credential-refresh request); a fresh nonce is drawn on every call, so
// call it once per attempt.
func NewHeaders(now time.Time, eventID string, body []byte, secrets ...[]byte) (http.Header, error) {
	h := make(http.Header, 4)
	if err := setHeaders(h, now, eventID, body, secrets); err != nil {
		return nil, err
	}
	return h, nil
}

// SetHeaders signs req for one attempt: it sets the four headers on req.
// body must be exactly the bytes req will send.
func SetHeaders(req *http.Request, now time.Time, eventID string, body []byte, secrets ...[]byte) error {
	return setHeaders(req.Header, now, eventID, body, secrets)
}

func setHeaders(h http.Header, now time.Time, eventID string, body []byte, secrets [][]byte) error {
	var use [][]byte
	for _, s := range secrets {
		if len(s) > 0 {
			use = append(use, s)
		}
	}
	if len(use) == 0 {
		return ErrNoSecret
	}
	if len(use) > MaxSecrets {
		return fmt.Errorf("webhook: %d secrets given, at most %d", len(use), MaxSecrets)
	}
	if eventID == "" {
		return fmt.Errorf("%w: %s is empty", ErrMissingHeader, HeaderEventID)
	}
	nonce, err := NewNonce()
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	sigs := make([]string, len(use))
	for i, s := range use {
		sigs[i] = signString(s, ts, nonce, body)
	}
	h.Set(HeaderSignature, strings.Join(sigs, " "))
	h.Set(HeaderTimestamp, ts)
	h.Set(HeaderNonce, nonce)
	h.Set(HeaderEventID, eventID)
	return nil
}
