package wire

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The routes of central's sync API, and the header that names the sending
// edge. The edge id travels outside the (compressed, signed) body so that
// central can find the edge's secrets and check the signature before it
// decompresses anything.
const (
	BatchPath     = "/sync/v1/batches"
	HeartbeatPath = "/sync/v1/heartbeat"
	HeaderEdgeID  = "X-Euterpe-Edge-Id"
)

// Error codes central answers in {"error":{"code":…}} on the sync routes.
// The shipper acts on them: CodeClockSkew (401, with central's Date
// header) makes it correct its signing clock and retry at once; the other
// 401/403 codes stop shipping until the operator acts; 400 with
// CodeInvalidBatch and 413 with CodeTooLarge split the batch and
// quarantine a single item (a 400 without central's code backs off; a 413
// without it, a proxy's body limit, splits the batch and is never
// quarantined); 400 with CodeUnsupportedFormat backs off and is never
// quarantined; 429/503 wait for Retry-After.
const (
	CodeClockSkew    = "clock_skew"
	CodeUnauthorized = "unauthorized"  // unknown edge, bad signature, replayed nonce
	CodeEdgeDisabled = "edge_disabled" // 403
	CodeInvalidBatch = "invalid_batch" // 400
	CodeTooLarge     = "too_large"     // 413: compressed or decompressed body over its cap
	CodeRateLimited  = "rate_limited"  // 429
	// CodeIncompleteBody (408): the body ended before its length or broke
	// off. It says nothing about the batch, so the shipper backs off.
	CodeIncompleteBody = "incomplete_body"
	// CodeUnsupportedFormat (400): the body is a batch or status but for
	// fields central does not know, sent by an edge newer than central.
	// It says nothing against the events, which an upgraded central takes.
	CodeUnsupportedFormat = "unsupported_format"
)

// MaxCompressedBytes caps a gzip-encoded upload as sent; MaxBodyBytes caps
// it after decompression.
const MaxCompressedBytes = MaxBodyBytes

// ErrUnsupported is matched (with ErrInvalid) when a body would decode but
// for fields this version does not know: central answers
// CodeUnsupportedFormat for it.
var ErrUnsupported = errors.New("sync body has fields this version does not know")

// ErrTooLarge is matched (with ErrInvalid) when a body, compressed or not,
// exceeds its cap: central answers 413 for it and 400 for other ErrInvalid.
var ErrTooLarge = errors.New("sync body too large")

// Gap reports events the edge dropped from a full spool (only `delta`
// events are ever dropped), so central records that a job's history has a
// hole instead of silently missing it. GapID is stable across resends:
// the edge, the job and the stream entry id of the first dropped event.
type Gap struct {
	GapID        string `json:"gap_id"`
	JobID        string `json:"job_id"`
	Type         string `json:"type"`
	Count        int64  `json:"count"`
	FirstEntryID string `json:"first_entry_id"`
	LastEntryID  string `json:"last_entry_id"`
	FirstTS      int64  `json:"first_ts"`
	LastTS       int64  `json:"last_ts"`
}

// MaxGapCount bounds a gap's count, far above what any spool drops: central
// adds counts into 64-bit totals, and a count near their limit (a faulty
// edge) would overflow them, failing the batch as a store error that the
// edge would resend for ever instead of a refusal it sets aside.
const MaxGapCount = 1 << 40

// GapID is the stable id of a gap.
func GapID(edgeID, jobID, firstEntryID string) string {
	return edgeID + ":" + jobID + ":gap:" + firstEntryID
}

func (g Gap) validate(edgeID string) error {
	switch {
	case !tokenRe.MatchString(g.JobID):
		return errors.New("job_id must be 1-128 characters of [A-Za-z0-9._:-]")
	case !ValidEntryID(g.FirstEntryID) || !ValidEntryID(g.LastEntryID):
		return errors.New(`first_entry_id and last_entry_id must be stream ids "<ms>-<seq>"`)
	case g.GapID != GapID(edgeID, g.JobID, g.FirstEntryID):
		return errors.New("gap_id must be edge_id:job_id:gap:first_entry_id")
	case !tokenRe.MatchString(g.Type):
		return errors.New("type is required")
	case g.Count <= 0 || g.Count > MaxGapCount:
		return fmt.Errorf("count must be 1 to %d", int64(MaxGapCount))
	case g.FirstTS <= 0 || g.LastTS < g.FirstTS:
		return errors.New("first_ts and last_ts must be positive and ordered")
	}
	return nil
}

// BatchResult is central's 200 answer to a batch: how many events were new
// and how many it already had (a resent batch is all duplicates).
type BatchResult struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
	Gaps       int `json:"gaps"`
	// Pruned counts the duplicates, and PrunedGaps the gaps, that are at
	// or before the latest entry retention removed from their job: not
	// stored, whether central once had them or never did (a batch the
	// edge quarantined, resent by hand past retention). Absent when 0.
	Pruned     int `json:"pruned,omitempty"`
	PrunedGaps int `json:"pruned_gaps,omitempty"`
}

// Status is the edge's heartbeat: what central shows for an idle edge.
type Status struct {
	EdgeID      string         `json:"edge_id"`
	SentAt      time.Time      `json:"sent_at"`
	Version     string         `json:"version"`
	StartedAt   time.Time      `json:"started_at"`
	UptimeS     int64          `json:"uptime_s"`
	Workers     int            `json:"workers"`
	Backlog     int64          `json:"backlog"`
	Pending     int64          `json:"pending"`
	DeadLetters int64          `json:"dead_letters"`
	Spool       SpoolStatus    `json:"spool"`
	Library     *LibraryStatus `json:"library,omitempty"`
	// RedisDropped is how many delta events the capture stream's cap in
	// Redis kept out of it, as counted in Redis: it survives a restart of
	// the edge (not of a Redis without persistence), and those deltas
	// reach central as gaps once the spool takes them. Left out when 0:
	// a central older than the field refuses unknown fields, so only an
	// edge that has dropped sends it (see the shipper for such a central).
	RedisDropped int64 `json:"redis_dropped,omitempty"`
}

// SpoolStatus describes the edge's on-disk spool of events not yet shipped.
type SpoolStatus struct {
	Events      int64 `json:"events"`
	Bytes       int64 `json:"bytes"`
	OldestTS    int64 `json:"oldest_ts,omitempty"` // Unix ms of the oldest spooled event; 0 when empty
	Dropped     int64 `json:"dropped"`             // delta events dropped since the edge started
	Quarantined int64 `json:"quarantined"`         // batches central refused (400/413), kept on the edge
}

// LibraryStatus is the media library's summary, when the edge has one.
type LibraryStatus struct {
	Files           int64 `json:"files"`
	DuplicateGroups int64 `json:"duplicate_groups"`
	Bytes           int64 `json:"bytes"`
}

// EncodeStatus validates s and returns its body.
func EncodeStatus(s Status) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// DecodeStatus parses and validates a heartbeat body.
func DecodeStatus(body []byte) (Status, error) {
	// Central stores the body as sent (edges.last_status): invalid UTF-8,
	// which encoding/json lets through inside strings and Postgres text
	// refuses, is a bad request rather than a failing insert.
	if !utf8.Valid(body) {
		return Status{}, fmt.Errorf("%w: body is not valid UTF-8", ErrInvalid)
	}
	var s Status
	if err := decodeStrict(body, &s); err != nil {
		return Status{}, err
	}
	return s, s.Validate()
}

// Validate checks a heartbeat.
func (s Status) Validate() error {
	switch {
	case CheckEdgeID(s.EdgeID) != nil:
		return fmt.Errorf("%w: %w", ErrInvalid, ErrEdgeID)
	case len(s.Version) > 128:
		return fmt.Errorf("%w: version exceeds 128 characters", ErrInvalid)
	case strings.ContainsRune(s.Version, 0):
		return fmt.Errorf("%w: version contains NUL", ErrInvalid)
	case s.UptimeS < 0 || s.Workers < 0 || s.Backlog < 0 || s.Pending < 0 || s.DeadLetters < 0 ||
		s.Spool.Events < 0 || s.Spool.Bytes < 0 || s.Spool.OldestTS < 0 || s.Spool.Dropped < 0 || s.Spool.Quarantined < 0 || s.RedisDropped < 0:
		return fmt.Errorf("%w: counts must not be negative", ErrInvalid)
	}
	return nil
}

// HeartbeatID is the id a heartbeat is signed under.
func HeartbeatID(edgeID string, sentAt time.Time) string {
	return edgeID + ":heartbeat:" + strconv.FormatInt(sentAt.UnixMilli(), 10)
}

func decodeStrict(body []byte, v any) error {
	if len(body) > MaxBodyBytes {
		return fmt.Errorf("%w: %w: body of %d bytes exceeds %d", ErrInvalid, ErrTooLarge, len(body), MaxBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if knownButFields(body, v) {
			return fmt.Errorf("%w: %w: %v", ErrInvalid, ErrUnsupported, err)
		}
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	// Only whitespace may follow the value. dec.More is no test of that:
	// it reports false before a ']' or '}', and central stores a status
	// as sent, so one with a stray "]}" after it would be stored as text
	// no reader can parse.
	if rest := bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return fmt.Errorf("%w: trailing data after the body", ErrInvalid)
	}
	return nil
}

// knownButFields reports whether body, which a strict decode into v
// refused, decodes when unknown fields are ignored: then only fields this
// version does not know stood in the way. Told by decoding again rather
// than by encoding/json's message, which no API promises.
func knownButFields(body []byte, v any) bool {
	fresh := reflect.New(reflect.TypeOf(v).Elem()).Interface()
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(fresh); err != nil {
		return false
	}
	return len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) == 0
}

// Compress gzips body; uploads are sent with Content-Encoding: gzip and
// signed over the compressed bytes, exactly as sent.
func Compress(body []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	_, _ = zw.Write(body)
	_ = zw.Close()
	return buf.Bytes()
}

// Decompress inflates a gzip body, refusing (ErrTooLarge) once the output
// would exceed limit bytes, so a gzip bomb costs at most limit+1 bytes of
// memory. Garbage is ErrInvalid.
func Decompress(compressed []byte, limit int64) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, fmt.Errorf("%w: not gzip: %v", ErrInvalid, err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: corrupt gzip: %v", ErrInvalid, err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("%w: %w: decompressed body exceeds %d bytes", ErrInvalid, ErrTooLarge, limit)
	}
	return out, nil
}

// SignHeartbeat sets the signature headers and the edge header on a
// heartbeat request whose body is exactly body.
func SignHeartbeat(req *http.Request, now time.Time, s Status, body []byte, secrets ...[]byte) error {
	req.Header.Set(HeaderEdgeID, s.EdgeID)
	return signHeaders(req, now, HeartbeatID(s.EdgeID, s.SentAt), body, secrets)
}
