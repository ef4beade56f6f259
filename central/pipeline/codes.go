package pipeline

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/vesta-cx/euterpe/daemon"
)

// Error codes of the contract (§3.1, §3.3, §4.3), and the few central adds
// for failures the contract's list has no word for (docs/pipeline.md).
const (
	CodeQueueUnavailable    = "QUEUE_UNAVAILABLE"
	CodeMessageTooLarge     = "MESSAGE_TOO_LARGE"
	CodeInvalidMessage      = "INVALID_MESSAGE"
	CodeIdempotencyConflict = "IDEMPOTENCY_CONFLICT"
	CodeUpstreamEmpty       = "UPSTREAM_EMPTY"
	CodeTransformInvalid    = "TRANSFORM_INVALID"
	CodeQualityFailed       = "QUALITY_FAILED"
	CodeStorageWriteFailed  = "STORAGE_WRITE_FAILED"
	CodeRepoUnavailable     = "REPO_UNAVAILABLE"

	// CodeVisibilityTimeout: the worker holding the job stopped
	// heartbeating (it died) and the visibility timeout passed.
	CodeVisibilityTimeout = "VISIBILITY_TIMEOUT"
	// CodeStageUnavailable: an exec or http job type did not answer (exit
	// status, timeout, connection refused, HTTP 5xx, 408 or 429).
	CodeStageUnavailable = "STAGE_UNAVAILABLE"
	// CodeInvalidAnswer: an exec or http job type answered something that
	// is not a contract answer (garbage, an unknown error_code, both or
	// neither of result_ref and error_code). The answer is refused.
	CodeInvalidAnswer = "INVALID_ANSWER"
	// CodeUpstreamIncomplete: the source has not yet delivered all of the
	// day (an edge whose spooled events are still on their way). Unlike
	// UPSTREAM_EMPTY it is retried: what is missing arrives later.
	CodeUpstreamIncomplete = "UPSTREAM_INCOMPLETE"
)

// StageCodes are the codes a stage (and an external job type's answer) may
// report: §4.3 without IDEMPOTENCY_CONFLICT, which only the enqueue path
// produces.
var StageCodes = []string{CodeUpstreamEmpty, CodeTransformInvalid, CodeQualityFailed, CodeStorageWriteFailed, CodeRepoUnavailable}

// Retry is the retry table: whether a failure with the code is retried
// (the job goes back to the queue until max_attempts) or final. Data and
// logic failures repeat on a retry; infrastructure ones may not.
var Retry = map[string]bool{
	CodeUpstreamEmpty:      false,
	CodeTransformInvalid:   false,
	CodeQualityFailed:      false,
	CodeStorageWriteFailed: true,
	CodeRepoUnavailable:    true,
	CodeInvalidMessage:     false,
	CodeMessageTooLarge:    false,
	CodeVisibilityTimeout:  true,
	CodeStageUnavailable:   true,
	CodeInvalidAnswer:      false,
	CodeUpstreamIncomplete: true,
}

// ErrBadFailure refuses to record a failure without a code of the enum
// (the keys of Retry) or without its attempt (§4.2: every failure carries
// both).
var ErrBadFailure = errors.New("pipeline: a failure needs an error_code of the contract and an attempt of at least 1")

// isFailureCode reports whether c is a code a job failure may be recorded
// with: one of the retry table's.
func isFailureCode(c string) bool {
	_, ok := Retry[c]
	return ok
}

func checkFailure(f *JobError, attempt int) error {
	switch {
	case f == nil:
		return ErrBadFailure
	case !isFailureCode(f.Code):
		return fmt.Errorf("%w: %q is not one", ErrBadFailure, truncate(f.Code, 64))
	case attempt < 1:
		return fmt.Errorf("%w: attempt %d", ErrBadFailure, attempt)
	}
	return nil
}

// Alert codes are logged with "alert":true (§3.3: log and alert).
var Alert = map[string]bool{CodeInvalidMessage: true, CodeMessageTooLarge: true, CodeInvalidAnswer: true}

// JobError is a failure with its contract code. Message is capped at 512
// characters and redacted when it is built by Fail.
type JobError struct {
	Code    string
	Message string
}

func (e *JobError) Error() string { return e.Code + ": " + e.Message }

// Fail builds a *JobError with a capped, redacted message.
func Fail(code, message string) *JobError {
	return &JobError{Code: code, Message: Redact(message)}
}

// secretish matches what must not survive into a stored or logged message:
// bearer credentials, operator tokens, and key=value pairs whose key names
// a secret (as in URL queries, DSNs and program output).
var secretish = regexp.MustCompile(`(?i)(bearer\s+)\S+|eop_[A-Za-z0-9_-]+|((?:secret|password|passwd|pwd|token|signature|x-amz-credential|x-amz-signature|access_key|secret_key|api_key)[A-Za-z_-]*"?\s*[=:]\s*"?)[^\s&"',;]+`)

// Redact removes URL passwords and secret-looking values, then caps the
// message at 512 characters.
func Redact(s string) string {
	return daemon.CapMessage(redactSecrets(s))
}

// RedactRef is Redact for a result_ref: the same redaction, no cap (a
// result_ref may be up to 2048 characters). A plain reference
// (s3://bucket/key, a path) is unchanged.
func RedactRef(s string) string { return redactSecrets(s) }

func redactSecrets(s string) string {
	s = daemon.RedactURL(s)
	return secretish.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretish.FindStringSubmatch(m)
		switch {
		case sub[1] != "":
			return sub[1] + "[REDACTED]"
		case sub[2] != "":
			return sub[2] + "[REDACTED]"
		}
		return "[REDACTED]"
	})
}

func isStageCode(c string) bool {
	for _, x := range StageCodes {
		if x == c {
			return true
		}
	}
	return false
}
