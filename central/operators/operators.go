package operators

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrationFiles embed.FS

// Migrations add the operators table to the central schema.
func Migrations() sqldb.Migrations {
	return sqldb.Embedded(migrationFiles)
}

// TokenPrefix starts every operator token, so a token pasted in the wrong
// place is recognisable (and secret scanners can find it).
const TokenPrefix = "eop_"

var (
	// ErrUnknownToken is returned for a missing, unknown or disabled token.
	ErrUnknownToken = errors.New("operators: unknown operator token")
	// ErrNotFound is returned for an unknown operator id.
	ErrNotFound = errors.New("operators: operator not found")
)

// Operator is an authenticated operator.
type Operator struct {
	ID   string `json:"operator_id"`
	Name string `json:"name"`
}

// Created is printed once by `operator create`; the token cannot be read
// back later.
type Created struct {
	OperatorID string `json:"operator_id"`
	Name       string `json:"name"`
	Token      string `json:"token"`
}

// Store keeps operators in the database.
type Store struct {
	db  *sqldb.DB
	now func() time.Time
}

// New returns an operator store on db.
func New(db *sqldb.DB) *Store { return &Store{db: db, now: time.Now} }

func hashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Create adds an operator named name and returns its token.
func (s *Store) Create(ctx context.Context, name string) (Created, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return Created{}, errors.New("operators: name must be 1-200 characters")
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return Created{}, fmt.Errorf("operators: token: %w", err)
	}
	c := Created{OperatorID: uuid.NewString(), Name: name, Token: TokenPrefix + base64.RawURLEncoding.EncodeToString(b)}
	_, err := s.db.ExecContext(ctx, s.db.Rebind(`INSERT INTO operators (id, name, token_hash, created_at) VALUES (?, ?, ?, ?)`),
		c.OperatorID, name, hashToken(c.Token), sqldb.Micros(s.now()))
	if err != nil {
		return Created{}, fmt.Errorf("operators: create: %w", err)
	}
	return c, nil
}

// Disable stops id's token from opening anything; it cannot be undone
// (create a new operator instead).
func (s *Store) Disable(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, s.db.Rebind(`UPDATE operators SET disabled_at = ? WHERE id = ? AND disabled_at IS NULL`),
		sqldb.Micros(s.now()), id)
	if err != nil {
		return fmt.Errorf("operators: disable: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var one int
		err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT 1 FROM operators WHERE id = ?`), id).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return fmt.Errorf("operators: disable: %w", err)
		}
	}
	return nil
}

// Authenticate returns the operator owning token, or ErrUnknownToken.
func (s *Store) Authenticate(ctx context.Context, token string) (Operator, error) {
	if !strings.HasPrefix(token, TokenPrefix) {
		return Operator{}, ErrUnknownToken
	}
	want := hashToken(token)
	var o Operator
	var stored string
	err := s.db.QueryRowContext(ctx, s.db.Rebind(`SELECT id, name, token_hash FROM operators
		WHERE token_hash = ? AND disabled_at IS NULL`), want).Scan(&o.ID, &o.Name, &stored)
	if errors.Is(err, sql.ErrNoRows) {
		return Operator{}, ErrUnknownToken
	}
	if err != nil {
		return Operator{}, fmt.Errorf("operators: authenticate: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(stored), []byte(want)) != 1 {
		return Operator{}, ErrUnknownToken
	}
	return o, nil
}

const operatorKey = "euterpe.operator"

// Auth is the middleware of the operator API: Authorization: Bearer
// <operator token>. A missing or unknown token is 401; a database that
// cannot answer is 503, so an outage never reads as "your token is wrong";
// any other failure of the lookup is the handler's error (500, logged).
func Auth(s Authenticator) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scheme, token, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
			if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="euterpe-operator"`)
				return daemon.Errorf(http.StatusUnauthorized, "unauthorized", "missing Authorization: Bearer <operator token>")
			}
			op, err := s.Authenticate(c.Request().Context(), strings.TrimSpace(token))
			switch {
			case errors.Is(err, ErrUnknownToken):
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="euterpe-operator", error="invalid_token"`)
				return daemon.Errorf(http.StatusUnauthorized, "unauthorized", "unknown or disabled operator token")
			case err != nil && sqldb.OutageReason(err) != "":
				c.Response().Header().Set("Retry-After", strconv.Itoa(daemon.OutageRetryAfter))
				return daemon.Errorf(http.StatusServiceUnavailable, "unavailable", "the operator store cannot be reached")
			case err != nil:
				// Not an outage (a permission, a bug): a 500 whose detail
				// is logged, not a 503 that says "retry" and hides it.
				return fmt.Errorf("operator token: %w", err)
			}
			c.Set(operatorKey, op)
			daemon.SetRecheck(c, func(ctx context.Context) error {
				_, err := s.Authenticate(ctx, strings.TrimSpace(token))
				return err
			})
			return next(c)
		}
	}
}

// FromContext returns the operator Auth resolved for this request.
func FromContext(c echo.Context) (Operator, bool) {
	op, ok := c.Get(operatorKey).(Operator)
	return op, ok
}
