package sqldb_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

var set = sqldb.Migrations{
	Postgres: fstest.MapFS{
		"00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id TEXT PRIMARY KEY, at BIGINT);\n")},
		"00002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id TEXT PRIMARY KEY);\n")},
	},
	SQLite: fstest.MapFS{
		"00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE a (id TEXT PRIMARY KEY, at BIGINT);\n")},
		"00002_b.sql": {Data: []byte("-- +goose Up\nCREATE TABLE b (id TEXT PRIMARY KEY);\n")},
	},
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqldb.Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	if db.Engine != sqldb.SQLite || db.Path != filepath.Join(dir, sqldb.DefaultFile) {
		t.Fatalf("default: %s %s", db.Engine, db.Path)
	}
	var mode, fk string
	_ = db.QueryRow("PRAGMA journal_mode").Scan(&mode)
	_ = db.QueryRow("PRAGMA foreign_keys").Scan(&fk)
	if mode != "wal" || fk != "1" {
		t.Fatalf("pragmas: journal_mode=%s foreign_keys=%s", mode, fk)
	}
	_ = db.Close()
	if st, err := os.Stat(filepath.Join(dir, sqldb.DefaultFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("database file mode: %v %v", st, err)
	}
	for _, bad := range []string{"mysql://x", "sqlite:", "redis://:pw@h/0", "pw-alone", "x y:pw"} {
		if _, err := sqldb.Open(ctx, bad, dir); err == nil {
			t.Errorf("%q opened", bad)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error leaks a password: %v", err)
		}
		if sqldb.CheckURL(bad) == nil {
			t.Errorf("CheckURL(%q) accepted", bad)
		}
	}
	if _, err := sqldb.Open(ctx, "", ""); err == nil {
		t.Error("no URL and no state dir opened")
	}
	if _, err := sqldb.Open(ctx, "postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=1", dir); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("unreachable postgres: %v", err)
	}
}

func TestRebind(t *testing.T) {
	ctx := context.Background()
	db := sqltest.Open(t, sqldb.Postgres)
	got := db.Rebind(`SELECT ? , '?' , "a?" , ?`)
	if got != `SELECT $1 , '?' , "a?" , $2` {
		t.Fatalf("rebind: %s", got)
	}
	var s string
	if err := db.QueryRowContext(ctx, db.Rebind(`SELECT ? || '?'`), "x").Scan(&s); err != nil || s != "x?" {
		t.Fatalf("%q %v", s, err)
	}
	lite := sqltest.Open(t, sqldb.SQLite)
	if lite.Rebind("SELECT ?") != "SELECT ?" {
		t.Fatal("sqlite must keep ?")
	}
}

// Many processes' worth of migrators racing on one fresh database: the
// lock makes exactly one apply each version and the rest see it applied.
func TestConcurrentMigrate(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			url := sqltest.URL(t, e)
			ctx := context.Background()
			var wg sync.WaitGroup
			applied := make([][]string, 6)
			errs := make([]error, 6)
			for i := range applied {
				wg.Add(1)
				go func() {
					defer wg.Done()
					db, err := sqldb.Open(ctx, url, "")
					if err != nil {
						errs[i] = err
						return
					}
					defer db.Close()
					applied[i], errs[i] = sqldb.Migrate(ctx, db, set)
				}()
			}
			wg.Wait()
			total := 0
			for i := range applied {
				if errs[i] != nil {
					t.Fatalf("migrator %d: %v", i, errs[i])
				}
				total += len(applied[i])
			}
			if total != 2 {
				t.Fatalf("versions applied %d times in total, want 2", total)
			}
		})
	}
}

func TestMigrateRejectsDuplicateVersions(t *testing.T) {
	db := sqltest.Open(t, sqldb.SQLite)
	if _, err := sqldb.Migrate(context.Background(), db, set, set); err == nil {
		t.Fatal("duplicate migration files accepted")
	}
}

// TestSQLiteSynchronous checks the durability setting of a SQLite URL:
// NORMAL by default, FULL or EXTRA on request, anything else refused.
func TestSQLiteSynchronous(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, c := range []struct {
		url  string
		want int // PRAGMA synchronous: 1 NORMAL, 2 FULL, 3 EXTRA
	}{
		{"", 1},
		{"sqlite:" + dir + "/a.db", 1},
		{"sqlite:" + dir + "/b.db?synchronous=full", 2},
		{"sqlite:" + dir + "/c.db?synchronous=EXTRA", 3},
		{"sqlite:" + dir + "/d.db?synchronous=off", -1},
		{"sqlite:" + dir + "/e.db?cache=shared", -1},
	} {
		if err := sqldb.CheckURL(c.url); (err != nil) != (c.want < 0) {
			t.Errorf("CheckURL(%q) = %v", c.url, err)
		}
		db, err := sqldb.Open(ctx, c.url, dir)
		if c.want < 0 {
			if err == nil {
				_ = db.Close()
				t.Errorf("%q opened", c.url)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.url, err)
		}
		var got int
		err = db.Tx(ctx, func(tx *sql.Tx) error { return tx.QueryRow("PRAGMA synchronous").Scan(&got) })
		if err == nil && got != c.want {
			err = fmt.Errorf("synchronous = %d, want %d", got, c.want)
		}
		var onPool int
		if err == nil {
			err = db.QueryRow("PRAGMA synchronous").Scan(&onPool)
		}
		if err == nil && onPool != c.want {
			err = fmt.Errorf("pool connection: synchronous = %d, want %d", onPool, c.want)
		}
		_ = db.Close()
		if err != nil {
			t.Errorf("%q: %v", c.url, err)
		}
	}
}

// A database URL's password, in its user info or in the password and
// sslpassword parameters that libpq URLs take, is in no error Open returns,
// whether the server is unreachable or refuses the login.
func TestOpenErrorsHideThePassword(t *testing.T) {
	const planted = "PLANTED-db-password-7f3a"
	refusing := "127.0.0.1:1"
	if u := os.Getenv("EUTERPE_TEST_POSTGRES_URL"); u != "" {
		if pu, err := url.Parse(u); err == nil {
			refusing = pu.Host
		}
	}
	for _, server := range []struct{ name, host string }{
		{"unreachable", "127.0.0.1:1"},
		{"refusing the login", refusing},
	} {
		for _, form := range []struct{ name, url string }{
			{"user info", "postgres://euterpe_no_such_role:" + planted + "@" + server.host + "/x?connect_timeout=2"},
			{"password parameter", "postgres://euterpe_no_such_role@" + server.host + "/x?connect_timeout=2&password=" + planted},
			{"sslpassword parameter", "postgresql://euterpe_no_such_role@" + server.host + "/x?sslpassword=" + planted + "&connect_timeout=2&sslmode=disable"},
			// Unencoded, these end the host for a URL parser, which reads
			// the password as a port and a path, a query or a fragment.
			{"slash in the password", "postgres://euterpe_no_such_role:1234/" + planted + "@" + server.host + "/x?connect_timeout=2"},
			{"question mark in the password", "postgres://euterpe_no_such_role:1234?" + planted + "@" + server.host + "/x?connect_timeout=2"},
			{"hash in the password", "postgres://euterpe_no_such_role:1234#" + planted + "@" + server.host + "/x?connect_timeout=2"},
			{"at sign in the password", "postgres://euterpe_no_such_role:" + planted + "@x@" + server.host + "/x?connect_timeout=2"},
		} {
			t.Run(server.name+"/"+form.name, func(t *testing.T) {
				db, err := sqldb.Open(context.Background(), form.url, t.TempDir())
				if err == nil {
					_ = db.Close()
					t.Fatal("opened")
				}
				if strings.Contains(err.Error(), planted) {
					t.Fatalf("error leaks the password: %v", err)
				}
				if !strings.Contains(err.Error(), server.host) {
					t.Fatalf("error does not name the server: %v", err)
				}
			})
		}
	}
}

// A state directory whose name SQLite's URI filenames would read as syntax
// ('#' ends the path, '%' starts an escape, '?' starts the parameters) holds
// the database itself, private, and nothing is created beside it.
func TestOpenStateDirWithURISyntaxInItsName(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"a#b", "c%41d", "e?f", "g h"} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, name)
			db, err := sqldb.Open(ctx, "", dir)
			if err != nil {
				t.Fatal(err)
			}
			_, err = db.Exec("CREATE TABLE t (x INTEGER)")
			_ = db.Close()
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(dir, "central.db"))
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("central.db mode %o, want 600", perm)
			}
			entries, err := os.ReadDir(parent)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != name {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("beside the state directory: %v", names)
			}
		})
	}
}

// CheckURL refuses a URL whose password a URL parser would read as part of
// the host, port, path or query (an unencoded "/", "?" or "#" in it): the
// driver would connect somewhere else, and its errors would quote the
// pieces. An "@" in a parameter's value is no such thing.
func TestCheckURLRefusesAMisreadPassword(t *testing.T) {
	const planted = "Xy9SECRET"
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"postgres://euterpe:" + planted + "@db.example:5432/euterpe", true},
		{"postgres://euterpe:p%2F" + planted + "@db.example:5432/euterpe", true},
		{"postgres://euterpe@db.example/euterpe?application_name=me@host", true},
		{"postgres://db.example/euterpe?sslmode=disable", true},
		{"postgres://u:p@db.example/my@db", true},
		{"postgres:///euterpe?host=/var/run/postgresql", true},
		{"postgres://u:p@[::1]:5432,h2:5432/euterpe", true},
		{"postgres://euterpe:1234/" + planted + "@db.example:5432/euterpe", false},
		{"postgres://euterpe:1234?" + planted + "@db.example:5432/euterpe", false},
		{"postgres://euterpe:1234#" + planted + "@db.example:5432/euterpe", false},
		{"postgresql://euterpe:ab/cd/" + planted + "@db.example/euterpe", false},
	} {
		err := sqldb.CheckURL(tt.url)
		if (err == nil) != tt.ok {
			t.Errorf("CheckURL(%q) = %v, want ok %v", tt.url, err, tt.ok)
		}
		if err != nil && strings.Contains(err.Error(), planted) {
			t.Errorf("CheckURL(%q) quotes the password: %v", tt.url, err)
		}
	}
}

// A server (or role, or database) whose default isolation is repeatable
// read turned every Tx into a repeatable-read transaction, and contended
// SKIP LOCKED claims into serialization failures. Tx pins read committed.
func TestPostgresTxIsReadCommitted(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(sqltest.URL(t, sqldb.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	// pgx sends a parameter it does not know as a run-time setting, and
	// reads "%20", not "+", as a space.
	u.RawQuery = strings.TrimPrefix(u.RawQuery+"&default_transaction_isolation=repeatable%20read", "&")
	db, err := sqldb.Open(ctx, u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var def, got string
	if err := db.QueryRowContext(ctx, `SHOW default_transaction_isolation`).Scan(&def); err != nil || def != "repeatable read" {
		t.Fatalf("the connection's default isolation is %q (%v), want repeatable read", def, err)
	}
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&got)
	})
	if err != nil || got != "read committed" {
		t.Fatalf("Tx runs at %q (%v), want read committed", got, err)
	}
}
