package runner

import "github.com/vesta-cx/euterpe/central/inbox"

// SetGuardThreshold lowers the §11 output guardrail's source size for a
// test and returns a function restoring it.
func SetGuardThreshold(n int64) func() {
	old := guardThreshold
	guardThreshold = n
	return func() { guardThreshold = old }
}

// SetBeforeOutputs makes r call fn after transcoding, before it writes any
// output object: where a test pauses an attempt.
func SetBeforeOutputs(r *Runner, fn func(j *inbox.Job)) { r.beforeOutputs = fn }
