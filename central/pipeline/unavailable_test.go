package pipeline

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func TestReason(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: "28P01"}, ReasonAuthFailed},
		{&pgconn.PgError{Code: "28000"}, ReasonAuthFailed},
		{&pgconn.PgError{Code: "08006"}, ReasonConnLost},
		{&pgconn.PgError{Code: "57P01"}, ReasonShuttingDown},
		{&pgconn.PgError{Code: "57014"}, ReasonTimeout},
		{&pgconn.PgError{Code: "23505"}, ""}, // a constraint is no outage
		{&pgconn.PgError{Code: "42601"}, ""},
		{fmt.Errorf("dial: %w", &net.DNSError{Err: "no such host", Name: "db", IsNotFound: true}), ReasonDNSError},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), ReasonTimeout},
		{fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), ReasonConnRefused},
		{driver.ErrBadConn, ReasonConnLost},
		{errors.New("unexpected EOF"), ReasonConnLost},
		{errors.New("some bug"), ""},
	}
	for _, c := range cases {
		if got := Reason(c.err); got != c.want {
			t.Errorf("%v: %q, want %q", c.err, got, c.want)
		}
	}
}

// Real connection failures classify as /ready reports them: a name that
// does not resolve is dns_error, a closed port connection_refused.
func TestReasonRealConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := sqldb.Open(ctx, "postgres://u@no-such-host.invalid:5432/db?connect_timeout=3", "")
	if r := Reason(err); r != ReasonDNSError {
		t.Errorf("unresolvable host: %q (%v)", r, err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	_, err = sqldb.Open(ctx, "postgres://u@"+addr+"/db?connect_timeout=3", "")
	if r := Reason(err); r != ReasonConnRefused && r != ReasonConnLost {
		t.Errorf("closed port: %q (%v)", r, err)
	}
	if ue := unavailable(CodeQueueUnavailable, err); ue == err {
		t.Errorf("closed port not classified as unavailable: %v", err)
	}
}
