package requesters

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Rewrap moves every requester's webhook secrets (current and previous) to
// the active KEK. It returns the number of secrets rewrapped.
func (s *Store) Rewrap(ctx context.Context) (int, error) {
	active := s.keys.ActiveID()
	type slot struct {
		id, prefix string
		ver        int
		sealed     credentials.Sealed
	}
	var slots []slot
	for _, prefix := range []string{"", "previous_"} {
		rows, err := s.db.QueryContext(ctx, s.db.Rebind(`SELECT id, `+prefix+`webhook_secret_version, `+prefix+`webhook_secret_encrypted, `+
			prefix+`webhook_secret_dek_wrapped, `+prefix+`webhook_secret_kek_id, `+prefix+`webhook_secret_encryption_version
			FROM requesters WHERE `+prefix+`webhook_secret_kek_id IS NOT NULL AND `+prefix+`webhook_secret_kek_id <> ?`), active)
		if err != nil {
			return 0, fmt.Errorf("requesters: rewrap: %w", err)
		}
		for rows.Next() {
			sl := slot{prefix: prefix}
			if err := rows.Scan(&sl.id, &sl.ver, &sl.sealed.Ciphertext, &sl.sealed.WrappedDEK, &sl.sealed.KEKID, &sl.sealed.Version); err != nil {
				rows.Close()
				return 0, err
			}
			slots = append(slots, sl)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
	}
	done := 0
	for _, sl := range slots {
		out, changed, err := s.keys.Rewrap(sl.sealed, credentials.WebhookSecretAAD(sl.id, sl.ver))
		if err != nil {
			return done, fmt.Errorf("requesters: rewrap %s: %w", sl.id, err)
		}
		if !changed {
			continue
		}
		p := sl.prefix
		err = s.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE requesters SET `+p+`webhook_secret_dek_wrapped = ?, `+p+`webhook_secret_kek_id = ?,
				`+p+`webhook_secret_encryption_version = ?, updated_at = ? WHERE id = ? AND `+p+`webhook_secret_version = ? AND `+p+`webhook_secret_kek_id = ?`),
				out.WrappedDEK, out.KEKID, out.Version, sqldb.Micros(s.now()), sl.id, sl.ver, sl.sealed.KEKID)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("requesters: rewrap %s: %w", sl.id, err)
		}
		done++
	}
	return done, nil
}
