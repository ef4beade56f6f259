package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Rewrap moves every job's credential blob to the keyring's active KEK by
// re-wrapping its DEK (the payload is untouched). Rows are updated only if
// their blob did not change meanwhile. It returns the number rewrapped.
func (s *Store) Rewrap(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.rewrapBatch(ctx, 200)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

func (s *Store) rewrapBatch(ctx context.Context, limit int) (int, error) {
	active := s.keys.ActiveID()
	type row struct {
		id, requester string
		version       int
		sealed        credentials.Sealed
	}
	var rows []row
	q, err := s.db.QueryContext(ctx, s.db.Rebind(`SELECT id, requester_id, credential_version, storage_creds_encrypted,
		storage_creds_dek_wrapped, storage_creds_kek_id, storage_creds_encryption_version FROM inbox_jobs
		WHERE storage_creds_kek_id IS NOT NULL AND storage_creds_kek_id <> ? ORDER BY id LIMIT ?`), active, limit)
	if err != nil {
		return 0, fmt.Errorf("inbox: rewrap: %w", err)
	}
	for q.Next() {
		var r row
		if err := q.Scan(&r.id, &r.requester, &r.version, &r.sealed.Ciphertext, &r.sealed.WrappedDEK, &r.sealed.KEKID, &r.sealed.Version); err != nil {
			q.Close()
			return 0, err
		}
		rows = append(rows, r)
	}
	q.Close()
	if err := q.Err(); err != nil {
		return 0, err
	}
	done := 0
	for _, r := range rows {
		out, changed, err := s.keys.Rewrap(r.sealed, credentials.JobAAD(r.id, r.requester, r.version))
		if err != nil {
			return done, fmt.Errorf("inbox: rewrap job %s: %w", r.id, err)
		}
		if !changed {
			continue
		}
		err = s.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE inbox_jobs SET storage_creds_dek_wrapped = ?, storage_creds_kek_id = ?,
				storage_creds_encryption_version = ?, updated_at = ? WHERE id = ? AND credential_version = ? AND storage_creds_kek_id = ?`),
				out.WrappedDEK, out.KEKID, out.Version, sqldb.Micros(s.now()), r.id, r.version, r.sealed.KEKID)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("inbox: rewrap job %s: %w", r.id, err)
		}
		done++
	}
	return done, nil
}
