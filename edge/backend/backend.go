package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/vesta-cx/euterpe/daemon"
)

// Error codes stored in a job's error field.
const (
	CodeTaskNotConfigured  = "task_not_configured"
	CodeInvalidPayload     = "invalid_payload"
	CodeBackendError       = "backend_error"
	CodeBackendUnreachable = "backend_unreachable"
	CodeBackendTimeout     = "backend_timeout"
	CodeInvalidResult      = "invalid_result"
	CodeResultTooLarge     = "result_too_large"
)

// Error is a backend failure as stored in the job hash: a stable code, the
// upstream status (HTTP status, or exit status of a program) when there is
// one, and a message of at most 512 characters that holds no secret.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Status  int    `json:"status,omitempty"`
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (status %d): %s", e.Code, e.Status, e.Message)
	}
	return e.Code + ": " + e.Message
}

// Errorf builds an *Error with a capped, URL-redacted message.
func Errorf(code string, status int, format string, args ...any) *Error {
	return &Error{Code: code, Status: status, Message: daemon.CapMessage(daemon.RedactURL(fmt.Sprintf(format, args...)))}
}

// AsError returns err as an *Error, wrapping anything else as backend_error.
func AsError(err error) *Error {
	var be *Error
	if errors.As(err, &be) {
		return be
	}
	return Errorf(CodeBackendError, 0, "%v", err)
}

// Request is one job handed to a backend. Payload is always a JSON object.
type Request struct {
	JobID   string
	Task    string
	Payload json.RawMessage
}

// Delta receives streamed text fragments in order. It must not block for
// long; the worker coalesces fragments before writing them anywhere.
type Delta func(text string)

// Backend runs one job and returns its result document (a JSON value). It
// returns ctx.Err() (possibly wrapped) when ctx is cancelled, and an *Error
// for every other failure.
type Backend interface {
	Run(ctx context.Context, req Request, delta Delta) (json.RawMessage, error)
}

// Func adapts a function to Backend; tests and benchmarks use it.
type Func func(ctx context.Context, req Request, delta Delta) (json.RawMessage, error)

// Run calls f.
func (f Func) Run(ctx context.Context, req Request, delta Delta) (json.RawMessage, error) {
	return f(ctx, req, delta)
}
