package sqldb

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"syscall"
	"testing/fstest"

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
// sets can grow without renumbering.
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
	dialect := goose.DialectSQLite3
	if db.Engine == Postgres {
		dialect = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, fmt.Errorf("migrate: lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	} else {
		unlock, err := fileLock(db.Path + ".migrate.lock")
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	p, err := goose.NewProvider(dialect, db.DB, fsys, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	applied := make([]string, 0, len(res))
	for _, r := range res {
		applied = append(applied, r.Source.Path)
	}
	return applied, nil
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
