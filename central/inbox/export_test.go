package inbox

import (
	"context"
	"database/sql"
)

// MoveForTest applies one transition of j through the store's single move
// path (guards included), for tests of that path.
func (s *Store) MoveForTest(ctx context.Context, j *Job, to string) error {
	return s.db.Tx(ctx, func(tx *sql.Tx) error {
		c := j.claim()
		if err := s.move(ctx, tx, j, &c, to, s.now(), ""); err != nil {
			return err
		}
		j.setClaim(c)
		return nil
	})
}
