package jobs

import (
	"errors"
	"fmt"
)

// ErrWrongType: a key an operation writes (or reads to decide what to
// write) holds another type than the edge stores there, typically a value
// a client or an operator SET under that name. The scripts check the
// types before their first write and refuse with it, writing nothing: a
// Lua script is not rolled back, so a command failing halfway would keep
// the writes made before it (a job with no queue entry, a terminal status
// whose acknowledgement never happens). It comes as a *WrongTypeError.
var ErrWrongType = errors.New("key holds another type")

// WrongTypeError names the key that holds another type and that type.
type WrongTypeError struct {
	Key  string
	Type string // as TYPE answers: string, list, hash, ...
}

// maxKeyInError keeps an error message short whatever a client put in an
// idempotency key.
const maxKeyInError = 200

func (e *WrongTypeError) Error() string {
	k := e.Key
	if len(k) > maxKeyInError {
		k = k[:maxKeyInError] + "..."
	}
	return fmt.Sprintf("%q holds a %.20s: %v", k, e.Type, ErrWrongType)
}

func (e *WrongTypeError) Unwrap() error { return ErrWrongType }

// MaxTTL is the largest job TTL in seconds Create accepts: every Redis
// version takes it for EXPIRE, and the scripts refresh TTLs only from a
// ttl_s of at most this many digits.
const MaxTTL int64 = 9_999_999_999
