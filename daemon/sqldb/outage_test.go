package sqldb_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func TestOutageReason(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: "28P01"}, sqldb.ReasonAuthFailed},
		{&pgconn.PgError{Code: "28000"}, sqldb.ReasonAuthFailed},
		{&pgconn.PgError{Code: "08006"}, sqldb.ReasonConnLost},
		{&pgconn.PgError{Code: "57P01"}, sqldb.ReasonShuttingDown},
		{&pgconn.PgError{Code: "53300"}, sqldb.ReasonResources}, // too many connections
		{&pgconn.PgError{Code: "53100"}, sqldb.ReasonResources}, // disk full
		{&pgconn.PgError{Code: "57014"}, sqldb.ReasonTimeout},
		{&pgconn.PgError{Code: "23505"}, ""}, // a constraint is no outage
		{&pgconn.PgError{Code: "42601"}, ""},
		{fmt.Errorf("dial: %w", &net.DNSError{Err: "no such host", Name: "db", IsNotFound: true}), sqldb.ReasonDNSError},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), sqldb.ReasonTimeout},
		{fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), sqldb.ReasonConnRefused},
		{driver.ErrBadConn, sqldb.ReasonConnLost},
		{errors.New("unexpected EOF"), sqldb.ReasonConnLost},
		{errors.New("some bug"), ""},
	}
	for _, c := range cases {
		if got := sqldb.OutageReason(c.err); got != c.want {
			t.Errorf("%v: %q, want %q", c.err, got, c.want)
		}
	}
}

// A damaged SQLite file is no outage: retrying does not mend it, so it
// must reach the operator as an error (a 500 logged), not a 503 a client
// retries forever. A file that is no database at all stays "unopenable".
func TestOutageReasonOfDamagedSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "d.db")
	db, err := sqldb.Open(ctx, "sqlite:"+path, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); CREATE INDEX t_v ON t (v)`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		if _, err := db.ExecContext(ctx, `INSERT INTO t (v) VALUES (?)`, fmt.Sprintf("value %06d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4096 * 2; i < len(b)-4096; i++ { // every page but the schema's and the last
		b[i] = 0xA5
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = sqldb.Open(ctx, "sqlite:"+path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM t WHERE v > ''`).Scan(&n)
	if err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("damaged file read: %d, %v", n, err)
	}
	if r := sqldb.OutageReason(err); r != "" {
		t.Errorf("a damaged file is an outage %q: %v", r, err)
	}

	junk := filepath.Join(t.TempDir(), "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database ", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = sqldb.Open(ctx, "sqlite:"+junk, "")
	if r := sqldb.OutageReason(err); r != sqldb.ReasonUnopenable {
		t.Errorf("a file that is no database: %q (%v)", r, err)
	}
}
