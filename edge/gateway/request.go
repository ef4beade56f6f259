package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// CreateRequest is a validated POST /v1/jobs body.
type CreateRequest struct {
	Task    string
	Payload json.RawMessage // compact JSON object
	TTL     int64           // 0 when the request gave none
}

// Fingerprint identifies the request for idempotency: the same task, TTL
// and payload (whitespace aside) give the same fingerprint.
func (r CreateRequest) Fingerprint() string {
	h := sha256.New()
	h.Write([]byte(r.Task))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(r.TTL, 10)))
	h.Write([]byte{0})
	h.Write(r.Payload)
	return hex.EncodeToString(h.Sum(nil))
}

// ParseCreate validates a POST /v1/jobs body: {"task", "payload", "ttl_s"?}.
// Every failure is a 400 *daemon.APIError whose code names the problem:
// invalid_json, unknown_field, invalid_field, missing_field, unknown_task,
// invalid_payload, invalid_ttl.
func ParseCreate(body []byte, maxTTL int64) (CreateRequest, error) {
	var raw struct {
		Task    json.RawMessage `json:"task"`
		Payload json.RawMessage `json:"payload"`
		TTLS    json.RawMessage `json:"ttl_s"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return CreateRequest{}, decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return CreateRequest{}, bad("invalid_json", "request body must be a single JSON object")
	}
	if err := checkFieldNames(body); err != nil {
		return CreateRequest{}, err
	}
	if len(raw.Task) == 0 || string(raw.Task) == "null" {
		return CreateRequest{}, bad("missing_field", "task is required")
	}
	var req CreateRequest
	if err := json.Unmarshal(raw.Task, &req.Task); err != nil {
		return CreateRequest{}, bad("invalid_field", "task must be a string")
	}
	if !jobs.ValidTask(req.Task) {
		return CreateRequest{}, bad("unknown_task", "task %q is not one of %s", truncate(req.Task, 64), strings.Join(jobs.Tasks, ", "))
	}
	if len(raw.Payload) == 0 {
		return CreateRequest{}, bad("missing_field", "payload is required")
	}
	if raw.Payload[0] != '{' {
		return CreateRequest{}, bad("invalid_payload", "payload must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw.Payload); err != nil {
		return CreateRequest{}, bad("invalid_payload", "payload is not valid JSON")
	}
	if !utf8.Valid(raw.Payload) { // JSON text is UTF-8; json.Compact does not check
		return CreateRequest{}, bad("invalid_payload", "payload is not valid UTF-8")
	}
	req.Payload = buf.Bytes()
	if len(raw.TTLS) > 0 && string(raw.TTLS) != "null" {
		n, err := strconv.ParseInt(string(raw.TTLS), 10, 64)
		if err != nil || n < 1 || n > maxTTL {
			return CreateRequest{}, bad("invalid_ttl", "ttl_s must be an integer between 1 and %d", maxTTL)
		}
		req.TTL = n
	}
	return req, nil
}

// createFields are the member names of a create body, exactly as the
// contract spells them.
var createFields = []string{"task", "payload", "ttl_s"}

// checkFieldNames refuses member names of the top-level object that are not
// exactly one of createFields, or that repeat one. encoding/json matches
// names without regard to case and keeps the last of duplicates, so
// {"TASK":…} would be taken as the task and a second "Task" would silently
// replace the first. body has already been decoded as one JSON object.
func checkFieldNames(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // the opening brace
		return bad("invalid_json", "request body is not valid JSON")
	}
	seen := make(map[string]bool, len(createFields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("invalid_json", "request body is not valid JSON")
		}
		name, _ := tok.(string)
		if !slices.Contains(createFields, name) {
			return bad("unknown_field", "unknown field %q (fields are %s)", truncate(name, 64), strings.Join(createFields, ", "))
		}
		if seen[name] {
			return bad("invalid_json", "field %q appears more than once", name)
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return bad("invalid_json", "request body is not valid JSON")
		}
	}
	return nil
}

func decodeError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return bad("invalid_json", "request body must be a JSON object")
		}
		return bad("invalid_field", "%s has the wrong type", te.Field)
	case errors.As(err, &se), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return bad("invalid_json", "request body is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return bad("unknown_field", "%s", strings.TrimPrefix(err.Error(), "json: "))
	default:
		return bad("invalid_json", "request body is not valid JSON")
	}
}

func bad(code, format string, args ...any) *daemon.APIError {
	return daemon.Errorf(http.StatusBadRequest, code, format, args...)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// validIdempotencyKey accepts 1-255 visible ASCII characters.
func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}
