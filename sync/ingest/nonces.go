package ingest

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Nonces is a webhook.NonceStore in the shared database, so every central
// pod refuses a request whose nonce any pod has already accepted.
type Nonces struct{ DB *sqldb.DB }

var _ webhook.NonceStore = Nonces{}

// Remember records nonce until expires, or fails with ErrReplayedNonce
// while it is remembered. One upsert decides atomically on both engines:
// a live row makes the WHERE false, so nothing is written and no row is
// counted; an expired row is taken over.
func (n Nonces) Remember(ctx context.Context, nonce string, expires, now time.Time) error {
	var affected int64
	err := n.DB.Tx(ctx, func(tx *sql.Tx) error {
		res, err := n.DB.ExecTx(ctx, tx, n.DB.Rebind(`INSERT INTO edge_sync_nonces (nonce, expires_at) VALUES (?, ?)
			ON CONFLICT (nonce) DO UPDATE SET expires_at = excluded.expires_at WHERE edge_sync_nonces.expires_at <= ?`),
			nonce, sqldb.Micros(expires), sqldb.Micros(now))
		if err != nil {
			return err
		}
		affected, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("ingest: remember nonce: %w", err)
	}
	if affected == 0 {
		return webhook.ErrReplayedNonce
	}
	return nil
}

// Prune deletes up to limit expired nonces and returns how many.
func (n Nonces) Prune(ctx context.Context, now time.Time, limit int) (int64, error) {
	var deleted int64
	err := n.DB.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, n.DB.Rebind(`DELETE FROM edge_sync_nonces WHERE nonce IN
			(SELECT nonce FROM edge_sync_nonces WHERE expires_at <= ? LIMIT ?)`), sqldb.Micros(now), limit)
		if err != nil {
			return err
		}
		deleted, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("ingest: prune nonces: %w", err)
	}
	return deleted, nil
}
