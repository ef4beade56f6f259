package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// JobMessage is the queue message of the contract (libs/contracts.JobMessage):
// what a worker, an exec program or an HTTP endpoint receives.
type JobMessage struct {
	JobID          string    `json:"job_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	JobType        string    `json:"job_type"`
	Symbol         string    `json:"symbol"`
	Asof           string    `json:"asof"` // UTC date, YYYY-MM-DD
	RequestedBy    string    `json:"requested_by"`
	CreatedAt      time.Time `json:"created_at"`
	Attempt        int       `json:"attempt"`
}

// DateLayout is the layout of asof.
const DateLayout = "2006-01-02"

// MaxMessageBytes is the largest JobMessage the queue accepts, as JSON;
// larger is MESSAGE_TOO_LARGE (a symbol, the one open-ended field, is the
// only way to get there).
const MaxMessageBytes = 4096

// MakeIdempotencyKey is the contract's make_idempotency_key: deterministic
// in (job_type, symbol, asof) and nothing else, so every producer — API,
// scheduler, backfill, any pod — derives the same key for the same run. It
// is "pk1:" followed by the hex SHA-256 of the three fields joined by NUL
// bytes (a byte no field may contain, so ("a","b\x00c") cannot collide with
// ("a\x00b","c")). The asof is normalised to YYYY-MM-DD first.
func MakeIdempotencyKey(jobType, symbol, asof string) string {
	if d, err := ParseAsof(asof); err == nil {
		asof = d.Format(DateLayout)
	}
	h := sha256.Sum256([]byte(jobType + "\x00" + symbol + "\x00" + asof))
	return "pk1:" + hex.EncodeToString(h[:])
}

// ParseAsof reads a UTC date.
func ParseAsof(s string) (time.Time, error) {
	return time.ParseInLocation(DateLayout, s, time.UTC)
}

// asofShape is what an asof that is not a day is told.
const asofShape = "asof must be a UTC date, YYYY-MM-DD"

// checkAsof refuses an asof that is not a day in the form DateLayout
// writes (INVALID_MESSAGE).
func checkAsof(asof string) error {
	if d, err := ParseAsof(asof); err != nil || d.Format(DateLayout) != asof {
		return invalid(asofShape)
	}
	return nil
}

// CheckDayStarted refuses (INVALID_MESSAGE) an asof after the day of now,
// UTC: no event of it can exist yet, and once succeeded its job would hold
// the day's key, so the day's real run (the scheduler's, after its slot)
// would be answered with an empty report. now is the database's clock
// (Store.Now), not a pod's. Today is accepted: an operator may want the day
// so far (what `make run`'s demo reports); that job then stands as the
// day's report, as the contract's idempotency rule has it. An asof that is
// not a day is left to Validate.
func CheckDayStarted(asof string, now time.Time) error {
	d, err := ParseAsof(asof)
	if err != nil {
		return nil
	}
	now = now.UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	if !d.After(today) {
		return nil
	}
	return invalid("asof %s has not started: the latest day that can be submitted is %s (today, UTC)", asof, today.Format(DateLayout))
}

var jobTypeRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// Validate checks m against the data contract: INVALID_MESSAGE for a field
// out of shape, MESSAGE_TOO_LARGE for a message over MaxMessageBytes. Both
// are final.
func (m JobMessage) Validate() error {
	switch {
	case !jobTypeRe.MatchString(m.JobType):
		return invalid("job_type must match %s", jobTypeRe)
	case m.Symbol == "" || !utf8.ValidString(m.Symbol) || strings.IndexFunc(m.Symbol, unicode.IsControl) >= 0:
		return invalid("symbol must be non-empty UTF-8 text without control characters")
	case strings.TrimSpace(m.Symbol) != m.Symbol:
		return invalid("symbol must not start or end with spaces")
	}
	if err := checkAsof(m.Asof); err != nil {
		return err
	}
	if m.IdempotencyKey != "" && m.IdempotencyKey != MakeIdempotencyKey(m.JobType, m.Symbol, m.Asof) {
		return invalid("idempotency_key does not match make_idempotency_key(job_type, symbol, asof)")
	}
	if m.RequestedBy == "" || len(m.RequestedBy) > 200 {
		return invalid("requested_by must be 1-200 characters")
	}
	b, _ := json.Marshal(m)
	if len(b) > MaxMessageBytes {
		return &JobError{Code: CodeMessageTooLarge, Message: fmt.Sprintf("message is %d bytes; the limit is %d", len(b), MaxMessageBytes)}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return &JobError{Code: CodeInvalidMessage, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode reports the contract code of err (a *JobError), or "".
func ErrorCode(err error) string {
	var je *JobError
	if errors.As(err, &je) {
		return je.Code
	}
	return ""
}
