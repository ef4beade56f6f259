package sqltest

import (
	"context"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// Engines are the engines Each runs, in order.
var Engines = []sqldb.Engine{sqldb.Postgres, sqldb.SQLite}

// Each runs body as a subtest per engine with a migrated, empty database.
func Each(t *testing.T, sets []sqldb.Migrations, body func(t *testing.T, db *sqldb.DB)) {
	t.Helper()
	for _, e := range Engines {
		t.Run(string(e), func(t *testing.T) {
			body(t, Open(t, e, sets...))
		})
	}
}

// URL returns a database URL for engine: a fresh Postgres database, or a
// SQLite file in a temporary directory.
func URL(t testing.TB, e sqldb.Engine) string {
	t.Helper()
	if e == sqldb.Postgres {
		return testsvc.Postgres(t)
	}
	return "sqlite:" + t.TempDir() + "/test.db"
}

// Open opens a fresh database of engine e, applies sets and closes it when
// the test ends.
func Open(t testing.TB, e sqldb.Engine, sets ...sqldb.Migrations) *sqldb.DB {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.Open(ctx, URL(t, e), "")
	if err != nil {
		t.Fatalf("open %s: %v", e, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if len(sets) > 0 {
		if _, err := sqldb.Migrate(ctx, db, sets...); err != nil {
			t.Fatalf("migrate %s: %v", e, err)
		}
	}
	return db
}
