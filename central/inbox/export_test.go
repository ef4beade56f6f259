package inbox

import (
	"context"
	"database/sql"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
)

// MoveForTest applies one transition of j through the store's single move
// path (guards included), for tests of that path.
func (s *Store) MoveForTest(ctx context.Context, j *Job, to string) error {
	return s.write(ctx, j, func(tx *sql.Tx, c *lease.Claim, now time.Time) error {
		return s.move(ctx, tx, j, c, to, now, "")
	})
}

// BetweenCredentialReadAndWrite makes UpdateCredentials call fn inside its
// transaction after it read the job's version and status and before it
// writes: what a concurrent commit would have changed by then.
func (s *Store) BetweenCredentialReadAndWrite(fn func(ctx context.Context, tx *sql.Tx) error) {
	s.credentialRace = fn
}
