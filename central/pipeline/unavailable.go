package pipeline

import (
	"errors"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// UnavailableError is a database that could not be reached: the queue's
// QUEUE_UNAVAILABLE (or the repo's REPO_UNAVAILABLE). It is retryable; the
// API answers 503 with Retry-After. Reason is the /ready reason.
type UnavailableError struct {
	Code   string
	Reason string
	Err    error
}

func (e *UnavailableError) Error() string {
	return e.Code + " (" + e.Reason + "): " + Redact(e.Err.Error())
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// ReadyReason is the reason /ready reports for the failed check.
func (e *UnavailableError) ReadyReason() string { return e.Reason }

// unavailable wraps err as code when it says the database cannot be
// reached, and returns it unchanged otherwise (a constraint or a bug is not
// an outage and must not be retried as one).
func unavailable(code string, err error) error {
	if err == nil {
		return nil
	}
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return err
	}
	if r := sqldb.OutageReason(err); r != "" {
		return &UnavailableError{Code: code, Reason: r, Err: err}
	}
	return err
}
