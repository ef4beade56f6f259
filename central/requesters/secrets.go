package requesters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Secret is one webhook signing secret with its version.
type Secret struct {
	Value     string
	Version   int
	ExpiresAt time.Time // zero for the current secret
}

// Secrets are the secrets a requester's webhooks and refresh calls are
// signed with: Current, and Previous while its overlap window lasts
// (Previous.ExpiresAt is when it ends).
type Secrets struct {
	Current  Secret
	Previous *Secret
	// Disabled reports a disabled requester (disabled_at set). It is read
	// from the row, so it is set even when opening a secret failed.
	Disabled bool
}

// Keys returns the secrets as byte slices, current first, then the
// previous one during its overlap (the form webhook.SetHeaders takes).
func (s Secrets) Keys() [][]byte {
	out := [][]byte{[]byte(s.Current.Value)}
	if s.Previous != nil {
		out = append(out, []byte(s.Previous.Value))
	}
	return out
}

// ErrSecretUnopenable means a stored webhook secret was read but cannot be
// opened: its KEK is not in the keyring, or the blob is corrupt. Unlike a
// failed read, it does not heal by itself; an operator has to act.
var ErrSecretUnopenable = errors.New("webhook secret cannot be opened")

// SecretsAt opens the requester's signing secrets as of now: the current one
// and the previous one while now is before its overlap expiry. It is the one
// reader of the secret columns; the dispatcher (with its short cache) and
// the runner's signed refresh calls both use it. Unknown requester:
// ErrNotFound; a secret that cannot be opened: ErrSecretUnopenable.
func (s *Store) SecretsAt(ctx context.Context, requesterID string, now time.Time) (Secrets, error) {
	var cur, prev credentials.Sealed
	var curVer int
	var prevKEK *string
	var prevEnc, prevVer *int
	var prevExp, disabled *int64
	err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT webhook_secret_encrypted, webhook_secret_dek_wrapped,
		webhook_secret_kek_id, webhook_secret_encryption_version, webhook_secret_version,
		previous_webhook_secret_encrypted, previous_webhook_secret_dek_wrapped, previous_webhook_secret_kek_id,
		previous_webhook_secret_encryption_version, previous_webhook_secret_version, previous_webhook_secret_expires_at,
		disabled_at
		FROM requesters WHERE id = ?`), requesterID).Scan(&cur.Ciphertext, &cur.WrappedDEK, &cur.KEKID, &cur.Version, &curVer,
		&prev.Ciphertext, &prev.WrappedDEK, &prevKEK, &prevEnc, &prevVer, &prevExp, &disabled)
	if errors.Is(err, sql.ErrNoRows) {
		return Secrets{}, ErrNotFound
	}
	if err != nil {
		return Secrets{}, fmt.Errorf("requesters: read secrets: %w", err)
	}
	out := Secrets{Disabled: disabled != nil}
	pt, err := s.keys.Open(cur, credentials.WebhookSecretAAD(requesterID, curVer))
	if err != nil {
		return Secrets{Disabled: out.Disabled}, fmt.Errorf("requesters: webhook secret of %s: %w: %w", requesterID, ErrSecretUnopenable, err)
	}
	out.Current = Secret{Value: string(pt), Version: curVer}
	if prev.Ciphertext != nil && prevKEK != nil && prevEnc != nil && prevVer != nil && prevExp != nil && now.Before(sqldb.FromMicros(*prevExp)) {
		prev.KEKID, prev.Version = *prevKEK, *prevEnc
		pt, err := s.keys.Open(prev, credentials.WebhookSecretAAD(requesterID, *prevVer))
		if err != nil {
			return Secrets{Disabled: out.Disabled}, fmt.Errorf("requesters: previous webhook secret of %s: %w: %w", requesterID, ErrSecretUnopenable, err)
		}
		out.Previous = &Secret{Value: string(pt), Version: *prevVer, ExpiresAt: sqldb.FromMicros(*prevExp)}
	}
	return out, nil
}

// WebhookSecrets is SecretsAt at the store's current time.
func (s *Store) WebhookSecrets(ctx context.Context, requesterID string) (Secrets, error) {
	return s.SecretsAt(ctx, requesterID, s.now())
}

// SigningKeys returns WebhookSecrets as Keys: current first, then the
// previous one during its overlap. The runner signs refresh calls with it.
func (s *Store) SigningKeys(ctx context.Context, requesterID string) ([][]byte, error) {
	sec, err := s.WebhookSecrets(ctx, requesterID)
	if err != nil {
		return nil, err
	}
	return sec.Keys(), nil
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

// ErrConcurrentRotation is returned when another rotation of the same
// requester committed first.
var ErrConcurrentRotation = errors.New("rotate secret: concurrent rotation, try again")

// RotateSecret gives requesterID a new webhook secret. The current secret
// becomes the previous one and is still used to sign (both signatures, space
// separated) until now+overlap, so the requester can switch at leisure. A
// rotation during another rotation's overlap drops the oldest secret.
// Unknown requester: an error wrapping ErrNotFound.
func (s *Store) RotateSecret(ctx context.Context, requesterID string, overlap time.Duration) (Rotation, error) {
	if overlap < 0 {
		return Rotation{}, errors.New("rotate secret: overlap must not be negative")
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return Rotation{}, err
	}
	now := s.now()
	var rot Rotation
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		var ver int
		err := tx.QueryRowContext(ctx, s.db.Rebind("SELECT webhook_secret_version FROM requesters WHERE id = ?"), requesterID).Scan(&ver)
		if errors.Is(err, sql.ErrNoRows) {
			return &notFoundError{fmt.Sprintf("rotate secret: no requester %q", requesterID)}
		}
		if err != nil {
			return fmt.Errorf("rotate secret: %w", err)
		}
		sealed, err := s.keys.Seal([]byte(secret), credentials.WebhookSecretAAD(requesterID, ver+1))
		if err != nil {
			return fmt.Errorf("rotate secret: %w", err)
		}
		res, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE requesters SET
			previous_webhook_secret_encrypted = webhook_secret_encrypted,
			previous_webhook_secret_dek_wrapped = webhook_secret_dek_wrapped,
			previous_webhook_secret_kek_id = webhook_secret_kek_id,
			previous_webhook_secret_encryption_version = webhook_secret_encryption_version,
			previous_webhook_secret_version = webhook_secret_version,
			previous_webhook_secret_expires_at = ?,
			webhook_secret_encrypted = ?, webhook_secret_dek_wrapped = ?, webhook_secret_kek_id = ?,
			webhook_secret_encryption_version = ?, webhook_secret_version = ?, updated_at = ?
			WHERE id = ? AND webhook_secret_version = ?`),
			sqldb.Micros(now.Add(overlap)), sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version, ver+1, sqldb.Micros(now),
			requesterID, ver)
		if err != nil {
			return fmt.Errorf("rotate secret: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrConcurrentRotation
		}
		rot = Rotation{RequesterID: requesterID, Secret: secret, Version: ver + 1, PreviousVersion: ver, OverlapUntil: now.Add(overlap)}
		return nil
	})
	return rot, err
}

// notFoundError keeps RotateSecret's message while matching ErrNotFound.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string        { return e.msg }
func (e *notFoundError) Is(target error) bool { return target == ErrNotFound }
