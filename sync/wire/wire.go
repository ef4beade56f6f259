package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/vesta-cx/euterpe/central/webhook"
)

// Limits bound what a receiver accepts, so one edge cannot exhaust it.
const (
	MaxEvents    = 500
	MaxBodyBytes = 1 << 20
	MaxDataBytes = 64 << 10
)

// Event is one entry of an edge job's events stream (job:{id}:events), as
// the edge streams contract defines it: type, ts, step and data.
type Event struct {
	EventID string `json:"event_id"`
	EdgeID  string `json:"edge_id"`
	JobID   string `json:"job_id"`
	EntryID string `json:"entry_id"` // the stream entry id on the edge, "<ms>-<seq>"
	Type    string `json:"type"`
	Step    string `json:"step"`
	// Task is the job's task (chat, embed, …) as the edge's job hash holds
	// it; the contract's events do not carry it, so the capture adds it.
	// Empty when the edge could not tell.
	Task string          `json:"task,omitempty"`
	TS   int64           `json:"ts"` // Unix milliseconds, as on the edge
	Data json.RawMessage `json:"data"`
}

// Batch is one upload.
type Batch struct {
	EdgeID string    `json:"edge_id"`
	SentAt time.Time `json:"sent_at"`
	Events []Event   `json:"events"`
	// Dropped reports gaps: delta events the edge dropped from its full
	// spool since its last accepted batch. A batch may carry only gaps.
	Dropped []Gap `json:"dropped,omitempty"`
}

// ErrInvalid is matched by every validation failure of Decode.
var ErrInvalid = errors.New("invalid sync batch")

var tokenRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ValidEntryID reports whether id is a stream entry id "<ms>-<seq>" as
// Redis writes it: two decimal numbers without leading zeros, each at most
// 2^63-1. Central orders and stores entries by those numbers as signed
// 64-bit integers, so a larger part (which a Redis clock never reaches)
// could not be told from its neighbours, and "01-0" would be a second
// event at the place of "1-0".
func ValidEntryID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	return ok && canonicalInt64(ms) && canonicalInt64(seq)
}

func canonicalInt64(s string) bool {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
}

// ErrEdgeID is matched when an edge id is not one central accepts.
var ErrEdgeID = errors.New("edge_id must be 1-128 characters of [A-Za-z0-9._:-]")

// CheckEdgeID reports (ErrEdgeID) an edge id that every
// batch and heartbeat carrying it would be refused for, so an edge can
// refuse it at start rather than spool for a central that never takes it.
func CheckEdgeID(id string) error {
	if !tokenRe.MatchString(id) {
		return ErrEdgeID
	}
	return nil
}

// EventID is the stable id of an edge event.
func EventID(edgeID, jobID, entryID string) string {
	return edgeID + ":" + jobID + ":" + entryID
}

// NewEvent builds an Event with its stable id.
func NewEvent(edgeID, jobID, entryID, typ, step string, ts int64, data json.RawMessage) Event {
	return Event{EventID: EventID(edgeID, jobID, entryID), EdgeID: edgeID, JobID: jobID, EntryID: entryID, Type: typ, Step: step, TS: ts, Data: data}
}

// emptyData is what the edge streams contract writes when an event has no data.
var emptyData = json.RawMessage(`{}`)

// normalize gives absent or null data the contract's default, so a batch
// encodes to the same bytes however it was built.
func (b *Batch) normalize() {
	for i := range b.Events {
		if d := b.Events[i].Data; len(d) == 0 || string(d) == "null" {
			b.Events[i].Data = emptyData
		}
	}
}

// Encode validates b and returns its body.
func Encode(b Batch) ([]byte, error) {
	b.Events = append([]Event(nil), b.Events...)
	b.normalize()
	if err := b.Validate(); err != nil {
		return nil, err
	}
	body, err := Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("encode sync batch: %w", err)
	}
	if len(body) > MaxBodyBytes {
		return nil, fmt.Errorf("%w: %w: body of %d bytes exceeds %d", ErrInvalid, ErrTooLarge, len(body), MaxBodyBytes)
	}
	return body, nil
}

// Marshal is json.Marshal without HTML escaping, which would rewrite <, >,
// & and U+2028/9 inside data as \u escapes, up to six times its size: data
// Validate measured within MaxDataBytes would reach central over it and be
// refused with its whole batch, and a body kept to be sent again would
// come back bigger than it went in.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Decode parses and validates a received body. Unknown fields are refused so
// a version skew between edge and central is loud, not silent: a body that
// is a batch but for fields this version does not know is ErrUnsupported
// (with ErrInvalid), so a receiver can tell a newer sender from a bad one.
func Decode(body []byte) (Batch, error) {
	var b Batch
	if err := decodeStrict(body, &b); err != nil {
		return Batch{}, err
	}
	b.normalize()
	if err := b.Validate(); err != nil {
		return Batch{}, err
	}
	return b, nil
}

// Sendable makes an event's data something central stores, so that no
// event — above all a job's terminal one, whose data is the job's result
// and whose arrival is the job's status — is held back for its data.
// Invalid UTF-8 (a backend's Latin-1 text, passed through as it came)
// becomes U+FFFD, one for each run of bad bytes; it can only sit inside
// JSON strings, so the data stays JSON. Data over MaxDataBytes is
// replaced by a note of its size. The edge applies it when an event is
// spooled, so the spool neither keeps nor counts against its budget bytes
// that would never be sent, and again when it sends, for rows spooled
// before; a second pass leaves its own output as it is.
func Sendable(data []byte) []byte {
	n := len(data)
	if !utf8.Valid(data) {
		data = bytes.ToValidUTF8(data, []byte("\uFFFD"))
	}
	if len(data) > MaxDataBytes {
		return fmt.Appendf(nil, `{"truncated":true,"bytes":%d}`, n)
	}
	return data
}

// Validate checks every field a receiver relies on.
func (b Batch) Validate() error {
	if err := CheckEdgeID(b.EdgeID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(b.Events) > MaxEvents || len(b.Events)+len(b.Dropped) == 0 {
		return fmt.Errorf("%w: a batch holds 1 to %d events (or only gaps), not %d", ErrInvalid, MaxEvents, len(b.Events))
	}
	if len(b.Dropped) > MaxEvents {
		return fmt.Errorf("%w: a batch reports at most %d gaps, not %d", ErrInvalid, MaxEvents, len(b.Dropped))
	}
	for i, g := range b.Dropped {
		if err := g.validate(b.EdgeID); err != nil {
			return fmt.Errorf("%w: dropped[%d]: %s", ErrInvalid, i, err)
		}
	}
	for i, e := range b.Events {
		if err := e.validate(b.EdgeID); err != nil {
			return fmt.Errorf("%w: events[%d]: %s", ErrInvalid, i, err)
		}
	}
	return nil
}

func (e Event) validate(edgeID string) error {
	switch {
	case e.EdgeID != edgeID:
		return errors.New("edge_id differs from the batch's")
	case !tokenRe.MatchString(e.JobID):
		return errors.New("job_id must be 1-128 characters of [A-Za-z0-9._:-]")
	case !ValidEntryID(e.EntryID):
		return errors.New(`entry_id must be a stream id "<ms>-<seq>" (decimal, no leading zeros, each part below 2^63)`)
	case e.EventID != EventID(e.EdgeID, e.JobID, e.EntryID):
		return errors.New("event_id must be edge_id:job_id:entry_id")
	case !tokenRe.MatchString(e.Type):
		return errors.New("type is required")
	case e.Task != "" && !tokenRe.MatchString(e.Task):
		return errors.New("task must be 1-128 characters of [A-Za-z0-9._:-]")
	case e.TS <= 0:
		return errors.New("ts must be positive Unix milliseconds")
	// Postgres text refuses NUL, and raw JSON (data) may hold invalid UTF-8
	// inside its strings: an event central cannot store is refused here,
	// as a bad request, rather than failing the insert on every resend.
	case strings.ContainsRune(e.Step, 0):
		return errors.New("step contains NUL")
	case len(e.Data) > MaxDataBytes:
		return fmt.Errorf("data exceeds %d bytes", MaxDataBytes)
	case !utf8.Valid(e.Data):
		return errors.New("data is not valid UTF-8")
	case len(e.Data) > 0 && !json.Valid(e.Data):
		return errors.New("data is not JSON")
	}
	return nil
}

// Sign sets the x-euterpe-* signature headers and the edge header on an
// upload request whose body is exactly body (the gzip bytes when
// compressed); the batch's first event id (or first gap id) stands as the
// request's event id.
func Sign(req *http.Request, now time.Time, b Batch, body []byte, secrets ...[]byte) error {
	id := ""
	switch {
	case len(b.Events) > 0:
		id = b.Events[0].EventID
	case len(b.Dropped) > 0:
		id = b.Dropped[0].GapID
	}
	req.Header.Set(HeaderEdgeID, b.EdgeID)
	return signHeaders(req, now, id, body, secrets)
}

func signHeaders(req *http.Request, now time.Time, id string, body []byte, secrets [][]byte) error {
	return webhook.SetHeaders(req, now, id, body, secrets...)
}
