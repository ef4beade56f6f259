package pipeline

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// StorageSecret is the name of the object storage credentials in
// pipeline_secrets.
const StorageSecret = "storage"

// ErrNoSecret is returned by OpenSecret for a name never saved.
var ErrNoSecret = errors.New("pipeline: secret not set")

func secretAAD(name string) []byte { return []byte("euterpe/pipeline-secret/v1/" + name) }

// SaveSecret seals secret with the keyring's active KEK (bound to name)
// and stores it with its public part (e.g. the access key id).
func SaveSecret(ctx context.Context, db *sqldb.DB, keys *credentials.Keyring, name, public, secret string) error {
	sealed, err := keys.Seal([]byte(secret), secretAAD(name))
	if err != nil {
		return err
	}
	return db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := db.ExecTx(ctx, tx, `INSERT INTO pipeline_secrets (name, public_value, secret_encrypted, secret_dek_wrapped, secret_kek_id,
			secret_encryption_version, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET public_value = excluded.public_value, secret_encrypted = excluded.secret_encrypted,
			secret_dek_wrapped = excluded.secret_dek_wrapped, secret_kek_id = excluded.secret_kek_id,
			secret_encryption_version = excluded.secret_encryption_version, updated_at = excluded.updated_at`,
			name, public, sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version, sqldb.Micros(time.Now()))
		return err
	})
}

// OpenSecret returns the public part and the opened secret of name.
func OpenSecret(ctx context.Context, db *sqldb.DB, keys *credentials.Keyring, name string) (public, secret string, err error) {
	var s credentials.Sealed
	err = db.QueryRowContext(ctx, db.Rebind(`SELECT public_value, secret_encrypted, secret_dek_wrapped, secret_kek_id, secret_encryption_version
		FROM pipeline_secrets WHERE name = ?`), name).Scan(&public, &s.Ciphertext, &s.WrappedDEK, &s.KEKID, &s.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", ErrNoSecret
	}
	if err != nil {
		return "", "", err
	}
	b, err := keys.Open(s, secretAAD(name))
	if err != nil {
		return "", "", err
	}
	return public, string(b), nil
}
