package operators

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// ErrNoSession is returned for a missing, unknown or expired console
// session, and for one whose operator was disabled since it began.
var ErrNoSession = errors.New("operators: no such console session")

// DefaultSessionTTL is how long a console sign-in lasts.
const DefaultSessionTTL = 12 * time.Hour

// Sessions are the console's sign-ins: an operator exchanges its token once
// for a random session id the browser keeps in a cookie. Only the id's
// SHA-256 is stored, so a copy of the table opens nothing. Every lookup
// joins the operator, so disabling an operator ends its sessions at once,
// on every pod.
type Sessions struct {
	db  *sqldb.DB
	ttl time.Duration
	now func() time.Time
}

// NewSessions returns the session store on db; ttl <= 0 means
// DefaultSessionTTL.
func NewSessions(db *sqldb.DB, ttl time.Duration) *Sessions {
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return &Sessions{db: db, ttl: ttl, now: time.Now}
}

// WithClock replaces the store's clock (tests).
func (s *Sessions) WithClock(now func() time.Time) *Sessions { s.now = now; return s }

// Session is a started sign-in. ID is the cookie value and never logged.
type Session struct {
	ID        string
	Operator  Operator
	ExpiresAt time.Time
}

// Start opens a session for the operator owning token (ErrUnknownToken
// otherwise; a requester's API key is not an operator token). Expired
// sessions are removed on the way, so the table does not grow without a
// sweeper.
func (s *Sessions) Start(ctx context.Context, auth Authenticator, token string) (Session, error) {
	op, err := auth.Authenticate(ctx, token)
	if err != nil {
		return Session{}, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return Session{}, fmt.Errorf("operators: session id: %w", err)
	}
	now := s.now()
	sess := Session{ID: base64.RawURLEncoding.EncodeToString(b), Operator: op, ExpiresAt: now.Add(s.ttl)}
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := s.db.ExecTx(ctx, tx, `DELETE FROM operator_sessions WHERE expires_at <= ?`, sqldb.Micros(now)); err != nil {
			return err
		}
		_, err := s.db.ExecTx(ctx, tx, `INSERT INTO operator_sessions (id_hash, operator_id, created_at, expires_at) VALUES (?, ?, ?, ?)`,
			hashToken(sess.ID), op.ID, sqldb.Micros(now), sqldb.Micros(sess.ExpiresAt))
		return err
	})
	if err != nil {
		return Session{}, fmt.Errorf("operators: start session: %w", err)
	}
	return sess, nil
}

// Lookup returns the operator of session id while it is unexpired and the
// operator enabled, else ErrNoSession.
func (s *Sessions) Lookup(ctx context.Context, id string) (Operator, error) {
	if id == "" {
		return Operator{}, ErrNoSession
	}
	var op Operator
	err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT o.id, o.name FROM operator_sessions s
		JOIN operators o ON o.id = s.operator_id
		WHERE s.id_hash = ? AND s.expires_at > ? AND o.disabled_at IS NULL`), hashToken(id), sqldb.Micros(s.now())).Scan(&op.ID, &op.Name)
	if errors.Is(err, sql.ErrNoRows) {
		return Operator{}, ErrNoSession
	}
	if err != nil {
		return Operator{}, fmt.Errorf("operators: session: %w", err)
	}
	return op, nil
}

// End removes session id (sign-out); ending an unknown one is not an
// error.
func (s *Sessions) End(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	if _, err := s.db.ExecContext(ctx, s.db.Rebind(`DELETE FROM operator_sessions WHERE id_hash = ?`), hashToken(id)); err != nil {
		return fmt.Errorf("operators: end session: %w", err)
	}
	return nil
}

// csrfLabel separates the CSRF token from any other value derived from a
// session id.
const csrfLabel = "euterpe console csrf v1"

// CSRFToken is the synchronizer token of session id: an HMAC of a fixed
// label keyed by the id. It is bound to the session (a token of another
// session, or of a signed-out one, does not match) and needs no storage;
// knowing it reveals nothing about the id.
func CSRFToken(id string) string {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte(csrfLabel))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// CheckCSRF reports, in constant time, whether got is session id's token.
func CheckCSRF(id, got string) bool {
	if id == "" || got == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(CSRFToken(id)), []byte(got)) == 1
}
