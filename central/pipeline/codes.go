package pipeline

import (
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
	// status, timeout, connection refused, HTTP 5xx).
	CodeStageUnavailable = "STAGE_UNAVAILABLE"
	// CodeInvalidAnswer: an exec or http job type answered something that
	// is not a contract answer (garbage, an unknown error_code, both or
	// neither of result_ref and error_code). The answer is refused.
	CodeInvalidAnswer = "INVALID_ANSWER"
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

// Redact caps a message at 512 characters after removing URL passwords and
// query strings (tokens travel there).
func Redact(s string) string { return daemon.CapMessage(daemon.RedactURL(s)) }

func isStageCode(c string) bool {
	for _, x := range StageCodes {
		if x == c {
			return true
		}
	}
	return false
}
