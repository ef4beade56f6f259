package inbox

import (
	"fmt"
	"strings"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
)

// Transitions is the inbox job state machine of contract §3. failed is
// terminal for requesters but may still move to queued (while attempts
// remain) or to dead_letter.
var Transitions = lease.Transitions{
	Machine: "inbox_jobs",
	Terminal: []string{
		schema.StatusSucceeded, schema.StatusFailed, schema.StatusDeadLetter,
	},
	Allowed: map[string][]string{
		schema.StatusQueued:     {schema.StatusClaimed},
		schema.StatusClaimed:    {schema.StatusFetching, schema.StatusQueued, schema.StatusFailed},
		schema.StatusFetching:   {schema.StatusProcessing, schema.StatusQueued, schema.StatusFailed},
		schema.StatusProcessing: {schema.StatusUploading, schema.StatusQueued, schema.StatusFailed},
		schema.StatusUploading:  {schema.StatusSucceeded, schema.StatusQueued, schema.StatusFailed},
		schema.StatusFailed:     {schema.StatusQueued, schema.StatusDeadLetter},
	},
}

// Guard is an extra condition on a transition, checked with the job's
// counters; the table above says which moves exist, Guards say when.
type Guard func(attemptCount, maxAttempts int) bool

// Guards holds the conditional moves of §3: failed -> queued only while
// attempt_count < max_attempts.
var Guards = map[[2]string]Guard{
	{schema.StatusFailed, schema.StatusQueued}: func(a, m int) bool { return a < m },
}

// CheckGuard returns a *lease.TransitionError (errors.Is
// lease.ErrInvalidTransition) when from -> to has a guard in Guards that the
// job's counters do not satisfy, else nil.
func CheckGuard(from, to string, attemptCount, maxAttempts int) error {
	g := Guards[[2]string{from, to}]
	if g == nil || g(attemptCount, maxAttempts) {
		return nil
	}
	return &lease.TransitionError{Machine: Transitions.Machine, From: from, To: to,
		Reason: fmt.Sprintf("guard does not hold at attempt_count %d, max_attempts %d", attemptCount, maxAttempts)}
}

// checkHeld returns a *lease.TransitionError for a move out of queued. A
// queued job is held by nobody: only the claim takes it out of queued, with
// a new claim_version and a lease. Until that claim the row still carries
// the claim_version of the worker that gave it back, so the fence alone
// would let that worker move it to claimed without a lease, where no
// reclaim ever finds it.
func checkHeld(from, to string) error {
	if from != schema.StatusQueued {
		return nil
	}
	return &lease.TransitionError{Machine: Transitions.Machine, From: from, To: to,
		Reason: "only a claim takes a job out of " + schema.StatusQueued}
}

// leasedList is the inbox's leased statuses as an SQL list of literals, for
// writes only a job's current holder may make.
var leasedList = sqlList(schema.InboxLease.Leased)

// terminalList is Transitions.Terminal as an SQL list of literals, for
// statements that must not touch a finished job.
var terminalList = sqlList(Transitions.Terminal)

func sqlList(states []string) string {
	var b strings.Builder
	for i, s := range states {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + s + "'")
	}
	return b.String()
}
