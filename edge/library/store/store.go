package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Store is an open library.db. DB is safe for concurrent use; SQLite
// serialises writers (every transaction begins IMMEDIATE) and the busy
// timeout makes a writer wait for another instead of failing.
type Store struct {
	DB   *sql.DB
	Path string
	// Now is the clock every timestamp and lease comparison uses.
	Now func() time.Time

	marks *marks // write-path marking (tests with guard triggers)
}

// DSN is the data source name of library.db: the project's SQLite settings
// (sqldb.SQLiteDSN) with SQLite's own WAL autocheckpoint left on between the
// explicit checkpoints of wal_maintenance_jobs.
func DSN(path string) string { return sqldb.SQLiteDSN(path) }

// Open opens (creating if needed) the database at path and migrates it to
// the current schema.
func Open(ctx context.Context, path string) (*Store, error) {
	s, err := OpenRaw(path)
	if err != nil {
		return nil, err
	}
	if err := Migrate(ctx, s.DB); err != nil {
		_ = s.DB.Close()
		return nil, err
	}
	return s, nil
}

// OpenRaw opens the database without migrating it; tests use it to build
// legacy fixtures.
func OpenRaw(path string) (*Store, error) {
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetConnMaxIdleTime(time.Minute)
	if err := db.Ping(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open %s: %w", path, sqldb.ExplainOpen(path, err))
	}
	return &Store{DB: db, Path: path, Now: time.Now}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.DB.Close() }

// NowMS is the store clock in Unix milliseconds, the unit of every
// timestamp column.
func (s *Store) NowMS() int64 { return s.Now().UnixMilli() }

// Ping is the readiness probe of the library.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.DB.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// MS converts a Unix-millisecond column value to a time (UTC).
func MS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// Tx runs fn in one IMMEDIATE transaction, committing when fn returns nil.
func (s *Store) Tx(ctx context.Context, fn func(*sql.Tx) error) error {
	return sqldb.InTx(ctx, s.DB, fn)
}
