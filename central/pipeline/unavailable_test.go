package pipeline

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Real connection failures classify as /ready reports them: a name that
// does not resolve is dns_error, a closed port connection_refused.
func TestReasonRealConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err := sqldb.Open(ctx, "postgres://u@no-such-host.invalid:5432/db?connect_timeout=3", "")
	if r := sqldb.OutageReason(err); r != sqldb.ReasonDNSError {
		t.Errorf("unresolvable host: %q (%v)", r, err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	_, err = sqldb.Open(ctx, "postgres://u@"+addr+"/db?connect_timeout=3", "")
	if r := sqldb.OutageReason(err); r != sqldb.ReasonConnRefused && r != sqldb.ReasonConnLost {
		t.Errorf("closed port: %q (%v)", r, err)
	}
	if ue := unavailable(CodeQueueUnavailable, err); ue == err {
		t.Errorf("closed port not classified as unavailable: %v", err)
	}
}
