package idempotency

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// ErrConflict is returned when a key was used for a different request.
var ErrConflict = errors.New("idempotency key reused with a different request")

// DefaultTTL is how long a key is remembered.
const DefaultTTL = 24 * time.Hour

// Response is the stored outcome of the first request under a key.
type Response struct {
	Status int
	Body   []byte
	JobID  string
}

// Store keeps idempotency keys.
type Store struct {
	db  *sqldb.DB
	ttl time.Duration
	now func() time.Time
}

// New returns a store remembering keys for ttl (DefaultTTL if <= 0). now
// is the clock Purge judges expiry by; Reserve is given its time.
func New(db *sqldb.DB, ttl time.Duration, now func() time.Time) *Store {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, ttl: ttl, now: now}
}

// Hash is the request hash stored with a key: SHA-256 of the canonical
// request bytes, hex.
func Hash(canonical []byte) string {
	h := sha256.Sum256(canonical)
	return hex.EncodeToString(h[:])
}

// Reserve records key for scope inside tx with requestHash and the response
// this request will produce (resp). It returns (nil, nil) when this request
// owns the key — the caller then does the work in the same tx — or the
// stored response of an earlier identical request, or ErrConflict.
//
// now is the time of tx's writes, from the caller: a clock that measures
// the database's on a connection of its own (the store's now) would, on its
// first reading, wait for the connection tx holds, and with every
// connection held so, each caller would wait out the measurement's timeout
// and fall back to this process's clock for the key's expiry.
func (s *Store) Reserve(ctx context.Context, tx *sql.Tx, now time.Time, scope, key, requestHash string, resp Response) (*Response, error) {
	res, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO idempotency_keys
		(scope, idem_key, request_hash, job_id, response_status, response_body, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (scope, idem_key) DO UPDATE SET request_hash = excluded.request_hash, job_id = excluded.job_id,
			response_status = excluded.response_status, response_body = excluded.response_body,
			created_at = excluded.created_at, expires_at = excluded.expires_at
		WHERE idempotency_keys.expires_at <= ?`),
		scope, key, requestHash, nullStr(resp.JobID), resp.Status, string(resp.Body),
		sqldb.Micros(now), sqldb.Micros(now.Add(s.ttl)), sqldb.Micros(now))
	if err != nil {
		return nil, fmt.Errorf("idempotency: reserve: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil, nil
	}
	var stored Response
	var hash string
	var jobID *string
	var body string
	err = tx.QueryRowContext(ctx, s.db.Rebind(`SELECT request_hash, job_id, response_status, response_body
		FROM idempotency_keys WHERE scope = ? AND idem_key = ?`), scope, key).Scan(&hash, &jobID, &stored.Status, &body)
	if err != nil {
		return nil, fmt.Errorf("idempotency: read key: %w", err)
	}
	if hash != requestHash {
		return nil, ErrConflict
	}
	stored.Body = []byte(body)
	if jobID != nil {
		stored.JobID = *jobID
	}
	return &stored, nil
}

// Purge deletes expired keys and returns how many.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	var n int64
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.db.Rebind(`DELETE FROM idempotency_keys WHERE expires_at <= ?`), sqldb.Micros(s.now()))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("idempotency: purge: %w", err)
	}
	return n, nil
}

func nullStr(v string) any {
	if v == "" {
		return nil
	}
	return v
}
