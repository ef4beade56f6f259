package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"syscall"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// Migrations is one set of embedded goose SQL files, a directory per engine
// (files named NNNNN_what.sql at the root of each fs.FS). Several sets may be
// applied together; their version numbers must not collide.
type Migrations struct {
	Postgres fs.FS
	SQLite   fs.FS
}

// Embedded is the Migrations of a package that embeds its files as
// migrations/postgres/*.sql and migrations/sqlite/*.sql (the layout every
// migration set in this module uses).
func Embedded(files fs.FS) Migrations {
	pg, _ := fs.Sub(files, "migrations/postgres")
	lite, _ := fs.Sub(files, "migrations/sqlite")
	return Migrations{Postgres: pg, SQLite: lite}
}

// VersionTable is the table goose records applied versions in.
const VersionTable = "euterpe_schema_versions"

// Migrate applies every pending migration of sets for db's engine, in
// version order. It is safe to call from many processes at once: Postgres
// takes a session advisory lock, SQLite an exclusive lock on a file next to
// the database. Versions added later with a lower number than one already
// applied are still applied (out-of-order allowed), so independently owned
// sets can grow without renumbering. On Postgres a statement waits at most
// migrateLocks.timeout for a table lock; a run that gave up on one is
// started again a few times (migrateLocks), unless the migration that gave
// up runs outside a transaction and may have been partly applied.
func Migrate(ctx context.Context, db *DB, sets ...Migrations) ([]string, error) {
	fsys, err := merge(db.Engine, sets)
	if err != nil {
		return nil, err
	}
	opts := []goose.ProviderOption{
		goose.WithTableName(VersionTable),
		goose.WithAllowOutofOrder(true),
		goose.WithDisableGlobalRegistry(true),
	}
	dialect, handle := goose.DialectSQLite3, db.DB
	if db.Engine == Postgres {
		dialect = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, fmt.Errorf("migrate: lock: %w", err)
		}
		if migrateLocks.wrap != nil {
			locker = migrateLocks.wrap(locker)
		}
		opts = append(opts, goose.WithSessionLocker(lockTimeoutLocker{locker, migrateLocks.timeout}))
		// The migration's session holds goose's advisory lock and a
		// lock_timeout. On a connection of db's pool a failure at the
		// wrong moment could hand both to the queues: a statement that
		// failed before it was sent (its context had ended) is reported
		// by pgx as a bad connection, and database/sql then gives the
		// connection back to pgx's pool without closing it, lock and all.
		// A handle of its own, closed when Migrate returns, ends every
		// session it opened. It connects as the pool does, less the
		// pool's own hooks (openPostgres sets none).
		if db.pool == nil {
			return nil, errors.New("migrate: a Postgres database not opened with sqldb.Open")
		}
		handle = stdlib.OpenDB(*db.pool.Config().ConnConfig.Copy())
		defer handle.Close()
	} else {
		unlock, err := fileLock(db.Path + ".migrate.lock")
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	p, err := goose.NewProvider(dialect, handle, fsys, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var applied []string
	for try := 1; ; try++ {
		res, err := p.Up(ctx)
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			res = partial.Applied
		}
		for _, r := range res {
			applied = append(applied, r.Source.Path)
		}
		switch {
		case err == nil:
			return applied, nil
		case !lockNotAvailable(err):
			return nil, fmt.Errorf("migrate: %w", err)
		case partial != nil && partial.Failed != nil && partial.Failed.Source != nil &&
			!inTransaction(fsys, partial.Failed.Source.Path):
			// Its statements before the one that gave up have run and
			// stay: run again, they would run twice.
			return nil, fmt.Errorf("migrate: %s runs outside a transaction (goose NO TRANSACTION) and gave up on a table lock "+
				"after lock_timeout (%v), perhaps partly applied, so it is not run again: %w",
				partial.Failed.Source.Path, migrateLocks.timeout, err)
		case try == migrateLocks.tries:
			return nil, fmt.Errorf("migrate: a table stayed locked past lock_timeout (%v) in all %d tries: %w",
				migrateLocks.timeout, try, err)
		}
		slog.WarnContext(ctx, "a migration waited past lock_timeout for a table another transaction holds; trying again",
			"lock_timeout", migrateLocks.timeout, "try", try, "tries", migrateLocks.tries, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("migrate: %w", err)
		case <-time.After(migrateLocks.pause):
		}
	}
}

// inTransaction reports whether the SQL migration at name in fsys runs in
// a transaction: it has no "-- +goose NO TRANSACTION" annotation. One that
// cannot be read is taken not to.
func inTransaction(fsys fs.FS, name string) bool {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "--") {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(line, "--")), "+goose NO TRANSACTION") {
			return false
		}
	}
	return true
}

// migrateLocks bounds how a Postgres migration waits for table locks. An
// ALTER TABLE queued behind one long transaction (a console listing, a
// pg_dump) holds every later statement on the table behind it in turn:
// claims, heartbeats and enqueues stall across the fleet while it waits, and
// leases run out. With lock_timeout the migration gives up instead, lets
// them through, and runs again after a pause.
var migrateLocks = struct {
	timeout time.Duration
	tries   int
	pause   time.Duration
	// wrap, when set (tests), wraps goose's session locker.
	wrap func(lock.SessionLocker) lock.SessionLocker
}{timeout: 5 * time.Second, tries: 5, pause: 2 * time.Second}

// lockNotAvailable reports Postgres's lock_timeout failure (55P03).
func lockNotAvailable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}

// lockTimeoutLocker sets lock_timeout on the session goose runs the
// migrations on, once goose's advisory lock is held (its lock call does
// not wait, so the timeout cannot cut that short). The session is one of
// Migrate's own handle, so the setting ends with it.
type lockTimeoutLocker struct {
	lock.SessionLocker
	timeout time.Duration
}

func (l lockTimeoutLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	if err := l.SessionLocker.SessionLock(ctx, conn); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET lock_timeout = %d", l.timeout.Milliseconds())); err != nil {
		// goose unlocks only after a lock call that succeeded.
		return errors.Join(fmt.Errorf("set lock_timeout: %w", err),
			l.SessionUnlock(context.WithoutCancel(ctx), conn))
	}
	return nil
}

func merge(engine Engine, sets []Migrations) (fs.FS, error) {
	out := fstest.MapFS{}
	for _, s := range sets {
		src := s.SQLite
		if engine == Postgres {
			src = s.Postgres
		}
		if src == nil {
			continue
		}
		names, err := fs.Glob(src, "*.sql")
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		for _, n := range names {
			if _, dup := out[n]; dup {
				return nil, fmt.Errorf("migrate: two migration sets both contain %s", n)
			}
			b, err := fs.ReadFile(src, n)
			if err != nil {
				return nil, fmt.Errorf("migrate: %w", err)
			}
			out[path.Base(n)] = &fstest.MapFile{Data: b, Mode: 0o444}
		}
	}
	return out, nil
}

func fileLock(p string) (func(), error) {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("migrate: lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("migrate: lock file: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
