package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// SecretSource gives the secrets to sign a requester's webhooks with: the
// current one first and, during a rotation's overlap, the previous one.
type SecretSource interface {
	Secrets(ctx context.Context, requesterID string, now time.Time) ([][]byte, error)
}

// ErrRequesterDisabled is returned for a requester that is disabled or gone;
// its events are dead-lettered.
var ErrRequesterDisabled = errors.New("requester is disabled or unknown")

// RequesterSecrets reads webhook secrets from the requesters table and opens
// them with the keyring. Opened secrets are cached for TTL (default 10 s),
// so a rotation reaches every dispatcher within that time.
type RequesterSecrets struct {
	DB   *sqldb.DB
	Keys *credentials.Keyring
	TTL  time.Duration

	mu    sync.Mutex
	cache map[string]cachedSecrets
}

type cachedSecrets struct {
	secrets [][]byte
	until   time.Time
	err     error
}

// Secrets implements SecretSource.
func (r *RequesterSecrets) Secrets(ctx context.Context, requesterID string, now time.Time) ([][]byte, error) {
	ttl := r.TTL
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	r.mu.Lock()
	if c, ok := r.cache[requesterID]; ok && now.Before(c.until) {
		r.mu.Unlock()
		return c.secrets, c.err
	}
	r.mu.Unlock()
	secrets, until, err := r.load(ctx, requesterID, now)
	if err != nil && !errors.Is(err, ErrRequesterDisabled) {
		return nil, err // do not cache transient failures
	}
	if until.IsZero() || until.After(now.Add(ttl)) {
		until = now.Add(ttl)
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[string]cachedSecrets{}
	}
	r.cache[requesterID] = cachedSecrets{secrets: secrets, until: until, err: err}
	r.mu.Unlock()
	return secrets, err
}

// load returns the secrets and, during an overlap, when the previous one
// stops being valid (the cache must not outlive it).
func (r *RequesterSecrets) load(ctx context.Context, requesterID string, now time.Time) ([][]byte, time.Time, error) {
	var cur credentials.Sealed
	var curVer int
	var prevCT, prevDEK []byte
	var prevKEK sql.NullString
	var prevEncVer, prevVer sql.NullInt64
	var prevExp, disabled sql.NullInt64
	err := r.DB.QueryRowContext(ctx, r.DB.Rebind(`SELECT webhook_secret_encrypted, webhook_secret_dek_wrapped,
		webhook_secret_kek_id, webhook_secret_encryption_version, webhook_secret_version,
		previous_webhook_secret_encrypted, previous_webhook_secret_dek_wrapped, previous_webhook_secret_kek_id,
		previous_webhook_secret_encryption_version, previous_webhook_secret_version,
		previous_webhook_secret_expires_at, disabled_at
		FROM requesters WHERE id = ?`), requesterID).Scan(
		&cur.Ciphertext, &cur.WrappedDEK, &cur.KEKID, &cur.Version, &curVer,
		&prevCT, &prevDEK, &prevKEK, &prevEncVer, &prevVer, &prevExp, &disabled)
	if errors.Is(err, sql.ErrNoRows) || err == nil && disabled.Valid {
		return nil, time.Time{}, fmt.Errorf("%w: %s", ErrRequesterDisabled, requesterID)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("requester %s: webhook secret: %w", requesterID, err)
	}
	s, err := r.Keys.Open(cur, credentials.WebhookSecretAAD(requesterID, curVer))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("requester %s: webhook secret: %w", requesterID, err)
	}
	out := [][]byte{s}
	var until time.Time
	if prevCT != nil && prevExp.Valid && now.Before(sqldb.FromMicros(prevExp.Int64)) {
		prev := credentials.Sealed{Ciphertext: prevCT, WrappedDEK: prevDEK, KEKID: prevKEK.String, Version: int(prevEncVer.Int64)}
		p, err := r.Keys.Open(prev, credentials.WebhookSecretAAD(requesterID, int(prevVer.Int64)))
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("requester %s: previous webhook secret: %w", requesterID, err)
		}
		out = append(out, p)
		until = sqldb.FromMicros(prevExp.Int64)
	}
	return out, until, nil
}

// Rotation is the result of RotateSecret. Secret is shown to the operator
// once and is never logged.
type Rotation struct {
	RequesterID     string
	Secret          string
	Version         int
	PreviousVersion int
	OverlapUntil    time.Time
}

// RotateSecret gives requesterID a new webhook secret. The current secret
// becomes the previous one and is still used to sign (both signatures, space
// separated) until now+overlap, so the requester can switch at leisure. A
// rotation during another rotation's overlap drops the oldest secret.
func RotateSecret(ctx context.Context, db *sqldb.DB, keys *credentials.Keyring, requesterID string, overlap time.Duration, now time.Time) (Rotation, error) {
	if overlap < 0 {
		return Rotation{}, errors.New("rotate secret: overlap must not be negative")
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return Rotation{}, err
	}
	var rot Rotation
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		var ver int
		err := tx.QueryRowContext(ctx, db.Rebind("SELECT webhook_secret_version FROM requesters WHERE id = ?"), requesterID).Scan(&ver)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("rotate secret: no requester %q", requesterID)
		}
		if err != nil {
			return fmt.Errorf("rotate secret: %w", err)
		}
		sealed, err := keys.Seal([]byte(secret), credentials.WebhookSecretAAD(requesterID, ver+1))
		if err != nil {
			return fmt.Errorf("rotate secret: %w", err)
		}
		us := sqldb.Micros(now)
		res, err := tx.ExecContext(ctx, db.Rebind(`UPDATE requesters SET
			previous_webhook_secret_encrypted = webhook_secret_encrypted,
			previous_webhook_secret_dek_wrapped = webhook_secret_dek_wrapped,
			previous_webhook_secret_kek_id = webhook_secret_kek_id,
			previous_webhook_secret_encryption_version = webhook_secret_encryption_version,
			previous_webhook_secret_version = webhook_secret_version,
			previous_webhook_secret_expires_at = ?,
			webhook_secret_encrypted = ?, webhook_secret_dek_wrapped = ?, webhook_secret_kek_id = ?,
			webhook_secret_encryption_version = ?, webhook_secret_version = ?, updated_at = ?
			WHERE id = ? AND webhook_secret_version = ?`),
			sqldb.Micros(now.Add(overlap)), sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version, ver+1, us,
			requesterID, ver)
		if err != nil {
			return fmt.Errorf("rotate secret: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return errors.New("rotate secret: concurrent rotation, try again")
		}
		rot = Rotation{RequesterID: requesterID, Secret: secret, Version: ver + 1, PreviousVersion: ver, OverlapUntil: now.Add(overlap)}
		return nil
	})
	return rot, err
}
