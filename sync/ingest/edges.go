package ingest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// SecretPrefix starts every edge sync secret, so a secret pasted in the
// wrong place is recognisable (and secret scanners can find it).
const SecretPrefix = "esync_"

var (
	// ErrNotFound is returned for an unknown edge id.
	ErrNotFound = errors.New("ingest: edge not found")
	// ErrConcurrentRotation is returned when another rotation of the same
	// edge committed first.
	ErrConcurrentRotation = errors.New("ingest: concurrent secret rotation, try again")
)

// SecretAAD binds a sealed edge secret to its edge and the secret's
// version, so the current and previous slots cannot be swapped and a blob
// copied to another row does not open.
func SecretAAD(edgeID string, version int) []byte {
	return []byte("euterpe/edge_sync_secret/v1\x00" + edgeID + "\x00" + strconv.Itoa(version))
}

// Registry keeps the edges and their sealed sync secrets.
type Registry struct {
	db   *sqldb.DB
	keys *credentials.Keyring
	now  func() time.Time
}

// NewRegistry returns the registry on db; secrets are sealed by keys.
func NewRegistry(db *sqldb.DB, keys *credentials.Keyring) *Registry {
	return &Registry{db: db, keys: keys, now: time.Now}
}

// Registered is printed once by `edge register`; the secret cannot be read
// back later.
type Registered struct {
	EdgeID     string `json:"edge_id"`
	Name       string `json:"name"`
	SyncSecret string `json:"sync_secret"`
}

func newSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("ingest: secret: %w", err)
	}
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Register adds an edge named name with a fresh sync secret.
func (r *Registry) Register(ctx context.Context, name string) (Registered, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return Registered{}, errors.New("ingest: edge name must be 1-200 characters")
	}
	secret, err := newSecret()
	if err != nil {
		return Registered{}, err
	}
	id := uuid.NewString()
	sealed, err := r.keys.Seal([]byte(secret), SecretAAD(id, 1))
	if err != nil {
		return Registered{}, fmt.Errorf("ingest: register: %w", err)
	}
	now := sqldb.Micros(r.now())
	err = r.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, r.db.Rebind(`INSERT INTO edges (id, name, secret_encrypted, secret_dek_wrapped,
			secret_kek_id, secret_encryption_version, secret_version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?)`),
			id, name, sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version, now, now)
		return err
	})
	if err != nil {
		return Registered{}, fmt.Errorf("ingest: register: %w", err)
	}
	return Registered{EdgeID: id, Name: name, SyncSecret: secret}, nil
}

// Rotation is the result of RotateSecret; Secret is shown once.
type Rotation struct {
	EdgeID       string    `json:"edge_id"`
	Secret       string    `json:"sync_secret"`
	Version      int       `json:"sync_secret_version"`
	OverlapUntil time.Time `json:"previous_secret_valid_until"`
}

// RotateSecret gives the edge a new sync secret. The current one becomes
// the previous one and is still accepted until now+overlap, so the edge
// can be reconfigured at leisure; a rotation during another's overlap
// drops the oldest secret. Unknown edge: ErrNotFound.
func (r *Registry) RotateSecret(ctx context.Context, edgeID string, overlap time.Duration) (Rotation, error) {
	if overlap < 0 {
		return Rotation{}, errors.New("ingest: rotate secret: overlap must not be negative")
	}
	secret, err := newSecret()
	if err != nil {
		return Rotation{}, err
	}
	now := r.now()
	var rot Rotation
	err = r.db.Tx(ctx, func(tx *sql.Tx) error {
		var ver int
		err := tx.QueryRowContext(ctx, r.db.Rebind(`SELECT secret_version FROM edges WHERE id = ?`), edgeID).Scan(&ver)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("rotate secret: no edge %q: %w", edgeID, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("ingest: rotate secret: %w", err)
		}
		sealed, err := r.keys.Seal([]byte(secret), SecretAAD(edgeID, ver+1))
		if err != nil {
			return fmt.Errorf("ingest: rotate secret: %w", err)
		}
		res, err := tx.ExecContext(ctx, r.db.Rebind(`UPDATE edges SET
			previous_secret_encrypted = secret_encrypted, previous_secret_dek_wrapped = secret_dek_wrapped,
			previous_secret_kek_id = secret_kek_id, previous_secret_encryption_version = secret_encryption_version,
			previous_secret_version = secret_version, previous_secret_expires_at = ?,
			secret_encrypted = ?, secret_dek_wrapped = ?, secret_kek_id = ?, secret_encryption_version = ?,
			secret_version = ?, updated_at = ?
			WHERE id = ? AND secret_version = ?`),
			sqldb.Micros(now.Add(overlap)), sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version,
			ver+1, sqldb.Micros(now), edgeID, ver)
		if err != nil {
			return fmt.Errorf("ingest: rotate secret: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return ErrConcurrentRotation
		}
		rot = Rotation{EdgeID: edgeID, Secret: secret, Version: ver + 1, OverlapUntil: now.Add(overlap)}
		return nil
	})
	return rot, err
}

// Disable stops the edge's batches and heartbeats (403 edge_disabled); its
// stored events stay. Disabling twice is not an error. Unknown: ErrNotFound.
func (r *Registry) Disable(ctx context.Context, edgeID string) error {
	return r.db.Tx(ctx, func(tx *sql.Tx) error {
		now := sqldb.Micros(r.now())
		res, err := tx.ExecContext(ctx, r.db.Rebind(`UPDATE edges SET disabled_at = COALESCE(disabled_at, ?), updated_at = ? WHERE id = ?`),
			now, now, edgeID)
		if err != nil {
			return fmt.Errorf("ingest: disable: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("disable: no edge %q: %w", edgeID, ErrNotFound)
		}
		return nil
	})
}

// Enable lets a disabled edge's batches and heartbeats in again: the
// edge, retrying every EUTERPE_SYNC_BACKOFF_MAX, ships its spool with its
// current secret. Enabling an enabled edge is not an error. Unknown:
// ErrNotFound.
func (r *Registry) Enable(ctx context.Context, edgeID string) error {
	return r.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, r.db.Rebind(`UPDATE edges SET disabled_at = NULL, updated_at = ? WHERE id = ?`),
			sqldb.Micros(r.now()), edgeID)
		if err != nil {
			return fmt.Errorf("ingest: enable: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("enable: no edge %q: %w", edgeID, ErrNotFound)
		}
		return nil
	})
}

// Credentials are what the sync endpoints verify a request with.
type Credentials struct {
	Disabled bool
	// Secrets: the current one, then the previous one during its overlap.
	Secrets [][]byte
}

// CredentialsAt opens the edge's secrets as of now. Unknown: ErrNotFound.
func (r *Registry) CredentialsAt(ctx context.Context, edgeID string, now time.Time) (Credentials, error) {
	var cur, prev credentials.Sealed
	var curVer int
	var prevKEK *string
	var prevEnc, prevVer *int
	var prevExp, disabled *int64
	err := r.db.QueryRowContext(ctx, r.db.Rebind(`SELECT secret_encrypted, secret_dek_wrapped, secret_kek_id,
		secret_encryption_version, secret_version, previous_secret_encrypted, previous_secret_dek_wrapped,
		previous_secret_kek_id, previous_secret_encryption_version, previous_secret_version, previous_secret_expires_at,
		disabled_at FROM edges WHERE id = ?`), edgeID).Scan(&cur.Ciphertext, &cur.WrappedDEK, &cur.KEKID, &cur.Version, &curVer,
		&prev.Ciphertext, &prev.WrappedDEK, &prevKEK, &prevEnc, &prevVer, &prevExp, &disabled)
	if errors.Is(err, sql.ErrNoRows) {
		return Credentials{}, ErrNotFound
	}
	if err != nil {
		return Credentials{}, fmt.Errorf("ingest: read edge secrets: %w", err)
	}
	out := Credentials{Disabled: disabled != nil}
	pt, err := r.keys.Open(cur, SecretAAD(edgeID, curVer))
	if err != nil {
		return out, fmt.Errorf("ingest: sync secret of edge %s: %w", edgeID, err)
	}
	out.Secrets = append(out.Secrets, pt)
	if prev.Ciphertext != nil && prevKEK != nil && prevEnc != nil && prevVer != nil && prevExp != nil && now.Before(sqldb.FromMicros(*prevExp)) {
		prev.KEKID, prev.Version = *prevKEK, *prevEnc
		pt, err := r.keys.Open(prev, SecretAAD(edgeID, *prevVer))
		if err != nil {
			return out, fmt.Errorf("ingest: previous sync secret of edge %s: %w", edgeID, err)
		}
		out.Secrets = append(out.Secrets, pt)
	}
	return out, nil
}

func secretColumns(prefix string) credentials.Columns {
	return credentials.Columns{
		Table: "edges", ID: "id", Prefix: prefix + "secret_", Version: prefix + "secret_version",
		AAD: func(id string, version int, _ []string) []byte { return SecretAAD(id, version) },
	}
}

// Rewrap moves every edge's sync secrets (current and previous) to the
// active KEK and returns how many it rewrapped.
func (r *Registry) Rewrap(ctx context.Context) (int, error) {
	n, err := credentials.RewrapSets(ctx, r.db, r.keys, r.now, secretColumns(""), secretColumns("previous_"))
	if err != nil {
		return n, fmt.Errorf("ingest: edges: %w", err)
	}
	return n, nil
}
