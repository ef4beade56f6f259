package jobs

import (
	"errors"
	"math/rand/v2"
	"strconv"
)

// Extension fields of the job hash, beyond the contract's schema, that make
// a script run twice for one call (the client resending a command whose
// reply was lost) write once. Readers of the contract's fields ignore them,
// as they do HasIdempotencyField (keys.go).
const (
	// queuedIDsField holds "<queued event id> <queue entry id>", written by
	// the create, so that its resend is answered with them.
	queuedIDsField = "queued_ids"
	// appliedField holds "token=event-id" of the job's last appliedKeep
	// transitions, separated by spaces.
	appliedField = "applied"
)

// appliedKeep is how many transition tokens a job hash keeps: the ops of
// one pipeline on the same job (a start and a finish at most) and the
// writes others may make between a run and its resend, each a few dozen
// bytes on every job hash.
const appliedKeep = 4

// The transition script trims the applied field by the spaces between its
// entries, which needs at least two of them kept: a smaller appliedKeep
// does not compile.
const _ = uint(appliedKeep - 2)

var appliedKeepLua = strconv.Itoa(appliedKeep)

// maxTokenLen bounds a caller's Transition.Token.
const maxTokenLen = 64

// ErrBadToken: a Transition.Token that is not 1 to 64 ASCII letters and
// digits (it is stored space-separated and matched with "=").
var ErrBadToken = errors.New("transition token must be 1 to 64 ASCII letters and digits")

// NewToken draws a Transition.Token: 64 random bits, hex. Only the few
// tokens a job hash keeps can collide with it.
func NewToken() string {
	t := strconv.FormatUint(rand.Uint64(), 16)
	for len(t) < 16 {
		t = "0" + t
	}
	return t
}

func validToken(t string) bool {
	if t == "" || len(t) > maxTokenLen {
		return false
	}
	for _, c := range []byte(t) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}
