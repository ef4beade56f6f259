package lease

import (
	"errors"
	"fmt"
)

// ErrStale is matched with errors.Is by every caller that must stop touching
// a row because its claim was lost.
var ErrStale = errors.New("lease lost: claim is stale")

// StaleError reports a fenced write that matched no row: the lease expired
// and the row was reclaimed (its claim_version moved on), or it finished.
type StaleError struct {
	Table   string
	ID      string
	Version int64 // the claim version this worker held
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("%s %s: claim_version %d is stale", e.Table, e.ID, e.Version)
}

// Is makes errors.Is(err, ErrStale) true for every StaleError.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ErrInvalidTransition is matched with errors.Is for any rejected status move.
var ErrInvalidTransition = errors.New("invalid status transition")

// TransitionError names both states of a move the table does not allow,
// or of an allowed move whose guard does not hold (Reason says why).
type TransitionError struct {
	Machine  string
	From, To string
	Reason   string // empty for a move outside the table
}

func (e *TransitionError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s: invalid transition %s -> %s: %s", e.Machine, e.From, e.To, e.Reason)
	}
	return fmt.Sprintf("%s: invalid transition %s -> %s", e.Machine, e.From, e.To)
}

// Is makes errors.Is(err, ErrInvalidTransition) true.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidTransition }

// ErrRepeatedClaim is matched with errors.Is when a batch write (MoveEach,
// MoveMany) names one row twice; the batch is refused before any write.
var ErrRepeatedClaim = errors.New("batch names one row twice")

// ErrArgType is matched with errors.Is when a value of a batch write does
// not fit the column it is written to.
var ErrArgType = errors.New("value does not fit its column")
