package runner

// SetGuardThreshold lowers the §11 output guardrail's source size for a
// test and returns a function restoring it.
func SetGuardThreshold(n int64) func() {
	old := guardThreshold
	guardThreshold = n
	return func() { guardThreshold = old }
}
