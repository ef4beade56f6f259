package requesters

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// ErrUnknownKey is returned for a missing, unknown or disabled API key.
var ErrUnknownKey = errors.New("requesters: unknown API key")

// ErrNotFound is returned for an unknown requester id.
var ErrNotFound = errors.New("requesters: requester not found")

// Requester is a requester as the API sees it after authentication.
type Requester struct {
	ID   string
	Name string
}

// Created is printed once by `euterpe-central requester create`; neither
// secret can be read back later.
type Created struct {
	RequesterID   string `json:"requester_id"`
	APIKey        string `json:"api_key"`
	WebhookSecret string `json:"webhook_secret"`
}

// Store keeps requesters in the database.
type Store struct {
	db   *sqldb.DB
	keys *credentials.Keyring
	now  func() time.Time
}

// New returns a requester store sealing webhook secrets with keys.
func New(db *sqldb.DB, keys *credentials.Keyring) *Store {
	return &Store{db: db, keys: keys, now: time.Now}
}

// HashKey is the stored form of an API key.
func HashKey(apiKey string) string {
	h := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(h[:])
}

func token(prefix string) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// Create adds a requester named name and returns its id and secrets.
func (s *Store) Create(ctx context.Context, name string) (Created, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return Created{}, errors.New("requester name must be 1-200 characters")
	}
	c := Created{RequesterID: uuid.NewString(), APIKey: token("eut_"), WebhookSecret: token("whsec_")}
	sealed, err := s.keys.Seal([]byte(c.WebhookSecret), credentials.WebhookSecretAAD(c.RequesterID, 1))
	if err != nil {
		return Created{}, err
	}
	now := sqldb.Micros(s.now())
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO requesters (id, name, api_key_hash,
			webhook_secret_encrypted, webhook_secret_dek_wrapped, webhook_secret_kek_id, webhook_secret_encryption_version,
			webhook_secret_version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`),
			c.RequesterID, name, HashKey(c.APIKey), sealed.Ciphertext, sealed.WrappedDEK, sealed.KEKID, sealed.Version, now, now)
		return err
	})
	if err != nil {
		return Created{}, fmt.Errorf("requesters: create: %w", err)
	}
	return c, nil
}

// Authenticate returns the requester owning apiKey, or ErrUnknownKey.
func (s *Store) Authenticate(ctx context.Context, apiKey string) (Requester, error) {
	if apiKey == "" {
		return Requester{}, ErrUnknownKey
	}
	want := HashKey(apiKey)
	var r Requester
	var stored string
	err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT id, name, api_key_hash FROM requesters
		WHERE api_key_hash = ? AND disabled_at IS NULL`), want).Scan(&r.ID, &r.Name, &stored)
	if errors.Is(err, sql.ErrNoRows) {
		return Requester{}, ErrUnknownKey
	}
	if err != nil {
		return Requester{}, fmt.Errorf("requesters: authenticate: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(stored), []byte(want)) != 1 {
		return Requester{}, ErrUnknownKey
	}
	return r, nil
}
