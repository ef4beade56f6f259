package sqldb_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
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
