package sqldb

import (
	"testing"
	"time"

	"github.com/pressly/goose/v3/lock"
)

// SetMigrateLocks shortens how Migrate waits for and retries table locks
// on Postgres until t ends.
func SetMigrateLocks(t testing.TB, timeout time.Duration, tries int, pause time.Duration) {
	saved := migrateLocks
	migrateLocks.timeout, migrateLocks.tries, migrateLocks.pause = timeout, tries, pause
	t.Cleanup(func() { migrateLocks = saved })
}

// WrapMigrateLocker makes Migrate on Postgres take goose's advisory lock
// through wrap(goose's locker) until t ends.
func WrapMigrateLocker(t testing.TB, wrap func(lock.SessionLocker) lock.SessionLocker) {
	saved := migrateLocks.wrap
	migrateLocks.wrap = wrap
	t.Cleanup(func() { migrateLocks.wrap = saved })
}
