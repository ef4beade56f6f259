package sqldb

import (
	"testing"
	"time"
)

// SetMigrateLocks shortens how Migrate waits for and retries table locks
// on Postgres until t ends.
func SetMigrateLocks(t testing.TB, timeout time.Duration, tries int, pause time.Duration) {
	saved := migrateLocks
	migrateLocks.timeout, migrateLocks.tries, migrateLocks.pause = timeout, tries, pause
	t.Cleanup(func() { migrateLocks = saved })
}
