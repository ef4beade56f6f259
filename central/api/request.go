package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/transcode"
)

// TranscodeRequest is the body of POST /transcode.
type TranscodeRequest struct {
	Source           *SourceRequest    `json:"source"`
	Output           *OutputRequest    `json:"output"`
	Renditions       []inbox.Rendition `json:"renditions"`
	StatusWebhookURL string            `json:"status_webhook_url,omitempty"`
	RefreshURL       string            `json:"refresh_url,omitempty"`
	Metadata         json.RawMessage   `json:"metadata,omitempty"`
}

// SourceRequest is either {url} (a signed URL) or an object in a bucket
// with credentials.
type SourceRequest struct {
	URL         string          `json:"url,omitempty"`
	Bucket      string          `json:"bucket,omitempty"`
	Key         string          `json:"key,omitempty"`
	Endpoint    string          `json:"endpoint,omitempty"`
	Region      string          `json:"region,omitempty"`
	Credentials *credentials.S3 `json:"credentials,omitempty"`
}

// OutputRequest is the bucket and prefix renditions are written under.
type OutputRequest struct {
	Bucket      string          `json:"bucket"`
	Prefix      string          `json:"prefix"`
	Endpoint    string          `json:"endpoint,omitempty"`
	Region      string          `json:"region,omitempty"`
	Credentials *credentials.S3 `json:"credentials"`
}

// FieldError names the request field that is invalid.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// refusedURL is the FieldError for a callback URL the address policy
// refused, still holding the policy's error so the server can log what an
// operator needs and the requester is not told.
type refusedURL struct {
	field *FieldError
	cause error
}

func (e *refusedURL) Error() string   { return e.field.Error() }
func (e *refusedURL) Unwrap() []error { return []error{e.field, e.cause} }

const (
	maxRenditions = 16
	maxString     = 1024
	// maxURL bounds a URL the job stores: a signed source URL, whose query
	// can be long, and the callback URLs requested on every event.
	maxURL = 8192
)

// decode parses body strictly (decodeStrict) as a job request.
func decode(body []byte) (*TranscodeRequest, error) {
	var r TranscodeRequest
	if err := decodeStrict(body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// decodeStrict parses body into v, which every request body of the API
// goes through: text Postgres could not store (storableText), unknown
// fields, trailing data, wrong types and names a parser could read two
// ways (unambiguousNames) are errors naming the field. No reason quotes a
// value, so a secret in the body never reaches the answer or a log.
func decodeStrict(body []byte, v any) error {
	if err := storableText(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			f := te.Field
			if f == "" {
				f = "body"
			}
			return &FieldError{Field: f, Reason: "has the wrong type (want " + te.Type.String() + ")"}
		case errors.As(err, &se):
			return &FieldError{Field: "body", Reason: fmt.Sprintf("is not valid JSON (offset %d)", se.Offset)}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &FieldError{Field: shorten(f), Reason: "is not a known field"}
		default:
			return &FieldError{Field: "body", Reason: "is not a valid JSON object"}
		}
	}
	// Not dec.More: it answers false before a stray ']' or '}', which would
	// let `{…}}` through.
	if len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) > 0 {
		return &FieldError{Field: "body", Reason: "has data after the JSON object"}
	}
	return unambiguousNames(body)
}

// storableText refuses a body Postgres could not store as sent: JSON lets
// invalid UTF-8 through inside strings and NUL in as \u0000, and Postgres
// text and jsonb refuse both — the insert would fail with a 500 after the
// request had passed every check. (Decoding would also fold invalid bytes
// into U+FFFD, so two different requests could share one idempotency hash.)
//
// A \uXXXX escape of a lone UTF-16 surrogate is the same case spelt in
// ASCII: Go decodes it to U+FFFD, jsonb refuses it (metadata is stored as
// sent), and SQLite would keep it.
func storableText(body []byte) error {
	if !utf8.Valid(body) {
		return &FieldError{Field: "body", Reason: "is not valid UTF-8"}
	}
	if loneSurrogate(body) {
		return &FieldError{Field: "body", Reason: "must not contain a lone UTF-16 surrogate escape (\\uD800-\\uDFFF without its pair)"}
	}
	if !bytes.Contains(body, []byte(`\u0000`)) {
		return nil
	}
	var v any
	if json.Unmarshal(body, &v) == nil && hasNUL(v) {
		return &FieldError{Field: "body", Reason: "must not contain NUL characters (\\u0000)"}
	}
	return nil
}

// loneSurrogate reports a \uXXXX escape in body naming a surrogate that is
// not a high one directly followed by a low one. A backslash can only
// start an escape (anywhere else the body is not JSON and decode refuses
// it), so every escape is found by skipping the one after each backslash.
func loneSurrogate(body []byte) bool {
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		r, ok := escapedRune(body[i:])
		switch {
		case !ok:
			i++ // \" \\ \n …: skip the escaped byte
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			if lo, ok := escapedRune(body[i+6:]); !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// escapedRune reads a \uXXXX escape at the start of b.
func escapedRune(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[2:6] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func hasNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.IndexByte(x, 0) >= 0
	case []any:
		for _, e := range x {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// validate checks r; checkURL vets callback URLs (scheme and, when
// configured, the address policy).
func (r *TranscodeRequest) validate(checkURL func(string) error) error {
	if r.Source == nil {
		return &FieldError{"source", "is required"}
	}
	if err := r.Source.validate(); err != nil {
		return err
	}
	if r.Output == nil {
		return &FieldError{"output", "is required"}
	}
	if err := required("output.bucket", r.Output.Bucket); err != nil {
		return err
	}
	if err := bounded("output.prefix", r.Output.Prefix); err != nil {
		return err
	}
	if err := outputPrefix(r.Output.Prefix); err != nil {
		return err
	}
	if err := endpoint("output.endpoint", r.Output.Endpoint); err != nil {
		return err
	}
	if err := bounded("output.region", r.Output.Region); err != nil {
		return err
	}
	if r.Output.Credentials == nil {
		return &FieldError{"output.credentials", "is required"}
	}
	if err := validateCreds("output.credentials", r.Output.Credentials); err != nil {
		return err
	}
	if len(r.Renditions) == 0 {
		return &FieldError{"renditions", "must list at least one rendition"}
	}
	if len(r.Renditions) > maxRenditions {
		return &FieldError{"renditions", fmt.Sprintf("must list at most %d renditions", maxRenditions)}
	}
	seen := map[string]bool{}
	for i, rd := range r.Renditions {
		field := fmt.Sprintf("renditions[%d]", i)
		tr := transcode.Rendition{Name: rd.Name, Codec: rd.Codec, BitrateKbps: rd.BitrateKbps,
			SampleRate: rd.SampleRateHz, Channels: rd.Channels, Container: rd.Container}
		if err := tr.Validate(); err != nil {
			var re *transcode.RenditionError
			if errors.As(err, &re) {
				f := re.Field
				if f == "sample_rate" {
					f = "sample_rate_hz"
				}
				return &FieldError{field + "." + f, re.Reason}
			}
			return &FieldError{field, err.Error()}
		}
		if seen[rd.Name] {
			return &FieldError{field + ".name", "repeats another rendition's name"}
		}
		seen[rd.Name] = true
	}
	if err := r.overSource(); err != nil {
		return err
	}
	for _, u := range []struct{ field, v string }{{"status_webhook_url", r.StatusWebhookURL}, {"refresh_url", r.RefreshURL}} {
		if u.v == "" {
			continue
		}
		if err := httpURL(u.v); err != nil {
			return &FieldError{u.field, err.Error()}
		}
		if len(u.v) > maxURL {
			return &FieldError{u.field, "is too long"}
		}
		if checkURL != nil {
			if err := checkURL(u.v); err != nil {
				return &refusedURL{&FieldError{u.field, err.Error()}, err}
			}
		}
	}
	if len(r.Metadata) > 0 {
		return validMetadata(r.Metadata)
	}
	return nil
}

func (s *SourceRequest) validate() error {
	if s.URL != "" {
		if s.Bucket != "" || s.Key != "" || s.Credentials != nil {
			return &FieldError{"source", "must be either {url} or {bucket, key, credentials}, not both"}
		}
		if err := httpURL(s.URL); err != nil {
			return &FieldError{"source.url", err.Error()}
		}
		if len(s.URL) > maxURL {
			return &FieldError{"source.url", "is too long"}
		}
		return nil
	}
	if err := required("source.bucket", s.Bucket); err != nil {
		return err
	}
	if err := required("source.key", s.Key); err != nil {
		return err
	}
	if err := endpoint("source.endpoint", s.Endpoint); err != nil {
		return err
	}
	if err := bounded("source.region", s.Region); err != nil {
		return err
	}
	if s.Credentials == nil {
		return &FieldError{"source.credentials", "is required with bucket and key"}
	}
	return validateCreds("source.credentials", s.Credentials)
}

func validateCreds(field string, c *credentials.S3) error {
	if err := required(field+".access_key_id", c.AccessKeyID); err != nil {
		return err
	}
	if err := required(field+".secret_access_key", c.SecretAccessKey); err != nil {
		return err
	}
	if len(c.SessionToken) > 8192 {
		return &FieldError{field + ".session_token", "is too long"}
	}
	return nil
}

// unexpired refuses credentials whose expires_at has passed at now. It is
// kept apart from validateCreds because it depends on when it is asked: an
// enqueue checks it only for a request that creates a job, since a retry
// under the same Idempotency-Key replays the stored answer whatever its
// credentials (they are not part of the request hash).
func unexpired(field string, c *credentials.S3, now time.Time) error {
	if c != nil && c.ExpiresAt != nil && !c.ExpiresAt.After(now) {
		return &FieldError{field + ".expires_at", "is in the past"}
	}
	return nil
}

// unexpired checks the request's credentials (unexpired) at now.
func (r *TranscodeRequest) unexpired(now time.Time) error {
	if err := unexpired("source.credentials", r.Source.Credentials, now); err != nil {
		return err
	}
	return unexpired("output.credentials", r.Output.Credentials, now)
}

func required(field, v string) error {
	if strings.TrimSpace(v) == "" {
		return &FieldError{field, "is required"}
	}
	return bounded(field, v)
}

func bounded(field, v string) error {
	if len(v) > maxString {
		return &FieldError{field, fmt.Sprintf("must be at most %d characters", maxString)}
	}
	return nil
}

func optionalURL(field, v string) error {
	if v == "" {
		return nil
	}
	if err := httpURL(v); err != nil {
		return &FieldError{field, err.Error()}
	}
	return nil
}

// outputPrefix refuses a prefix the runner would refuse to write under
// (storage.CheckKey: file-system backed servers resolve "." and ".." as a
// path, so the outputs would land outside the prefix). Every key the runner
// writes is the prefix, "/" and names that are never such a segment, so
// checking the prefix alone is the same check.
func outputPrefix(prefix string) error {
	err := storage.CheckKey(prefix)
	switch {
	case errors.Is(err, storage.ErrInvalidKey):
		return &FieldError{"output.prefix", storage.ErrInvalidKey.Error()}
	case err != nil:
		return &FieldError{"output.prefix", err.Error()}
	}
	return nil
}

// overSource refuses outputs whose final key is the source object: the
// same bucket on the same server (storage.SameBucket) and the same key.
// Promotion would replace the requester's source, and a retry would
// transcode the output. A signed URL is compared when storage.URLKey reads
// it as an object of the output bucket; a URL on another host (a CDN, a
// custom domain) cannot be told apart and is accepted.
func (r *TranscodeRequest) overSource() error {
	src, ok := storage.SourceIn(r.Source.URL, storage.Bucket{Endpoint: r.Source.Endpoint, Name: r.Source.Bucket}, r.Source.Key,
		storage.Bucket{Endpoint: r.Output.Endpoint, Name: r.Output.Bucket})
	if !ok {
		return nil
	}
	for i, rd := range r.Renditions {
		tr := transcode.Rendition{Name: rd.Name, Codec: rd.Codec, Container: rd.Container}
		if storage.ObjectKey(r.Output.Prefix, tr.FileName()) == src {
			return &FieldError{"output.prefix", fmt.Sprintf(
				"with renditions[%d] names the source object (%s in the same bucket): the output would replace it", i, tr.FileName())}
		}
	}
	return nil
}

// endpoint checks an optional storage endpoint as the runner's storage
// client will: refused now, the requester learns it at once rather than
// from a job failed with invalid_endpoint. The reason does not echo the
// value, whose userinfo may hold a password.
func endpoint(field, v string) error {
	if err := optionalURL(field, v); err != nil || v == "" {
		return err
	}
	if err := storage.CheckEndpoint(v); err != nil {
		return &FieldError{field, "must be http(s)://host[:port], without a path, query, fragment or user info"}
	}
	return nil
}

// httpURL accepts absolute http and https URLs with a host.
func httpURL(v string) error {
	u, err := url.Parse(v)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return errors.New("must be an absolute http or https URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return errors.New("must use http or https")
	}
	return nil
}

// canonical is the request as hashed for idempotency: every field except
// credentials and the signature parameters of a signed source URL
// (authorization material that a retry may legitimately renew;
// credentials.ObjectURL says which), in a fixed order.
func (r *TranscodeRequest) canonical() []byte {
	c := struct {
		Source           inbox.Source      `json:"source"`
		Output           inbox.Output      `json:"output"`
		Renditions       []inbox.Rendition `json:"renditions"`
		StatusWebhookURL string            `json:"status_webhook_url"`
		RefreshURL       string            `json:"refresh_url"`
		Metadata         json.RawMessage   `json:"metadata,omitempty"`
	}{
		Source:           r.hashedSource(),
		Output:           inbox.Output{Bucket: r.Output.Bucket, Prefix: r.Output.Prefix, Endpoint: r.Output.Endpoint, Region: r.Output.Region},
		Renditions:       r.Renditions,
		StatusWebhookURL: r.StatusWebhookURL,
		RefreshURL:       r.RefreshURL,
	}
	if len(r.Metadata) > 0 {
		// Map keys sorted: canonical. Numbers keep their literal text: as
		// float64, 9007199254740993 and …992 would hash alike and a
		// different request would replay the first one's job.
		dec := json.NewDecoder(bytes.NewReader(r.Metadata))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) == nil {
			c.Metadata, _ = json.Marshal(v)
		}
	}
	b, _ := json.Marshal(c)
	return b
}

func (r *TranscodeRequest) source() inbox.Source {
	if r.Source.URL != "" {
		// Only the plain URL is stored for routing; the full signed URL
		// goes into the sealed blob.
		return inbox.Source{URL: credentials.PlainURL(r.Source.URL)}
	}
	return inbox.Source{Bucket: r.Source.Bucket, Key: r.Source.Key, Endpoint: r.Source.Endpoint, Region: r.Source.Region}
}

// hashedSource is the source as the idempotency hash covers it.
func (r *TranscodeRequest) hashedSource() inbox.Source {
	if r.Source.URL != "" {
		return inbox.Source{URL: credentials.ObjectURL(r.Source.URL)}
	}
	return r.source()
}

func (r *TranscodeRequest) secrets() credentials.Storage {
	st := credentials.Storage{Output: *r.Output.Credentials}
	if r.Source.URL != "" {
		st.SourceURL = r.Source.URL
	} else {
		st.Source = r.Source.Credentials
	}
	return st
}
