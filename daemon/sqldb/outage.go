package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Reasons a database could not be reached, as central's /ready reports
// them (the pipeline contract's §3.1 examples first, then central's own).
const (
	ReasonAuthFailed   = "auth_failed"
	ReasonTimeout      = "timeout"
	ReasonDNSError     = "dns_error"
	ReasonConnRefused  = "connection_refused"
	ReasonConnLost     = "connection_lost"
	ReasonLocked       = "database_locked"
	ReasonUnopenable   = "database_unopenable"
	ReasonShuttingDown = "shutting_down"
	ReasonResources    = "insufficient_resources"
)

var connLost = regexp.MustCompile(`(?i)(unexpected EOF|broken pipe|connection reset|conn closed|closed pool|connection refused|failed to connect|bad connection|i/o timeout|use of closed network connection|sql: database is closed)`)

// OutageReason classifies a database error by why it could not be reached, or
// returns "" for an error that is not an outage (constraint, syntax, …).
func OutageReason(err error) string {
	var pe *pgconn.PgError
	var dns *net.DNSError
	var se *sqlite.Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &pe):
		switch {
		case pe.Code == "28P01" || pe.Code == "28000":
			return ReasonAuthFailed
		case strings.HasPrefix(pe.Code, "08"):
			return ReasonConnLost
		case strings.HasPrefix(pe.Code, "53"): // too many connections, disk full, out of memory
			return ReasonResources
		case strings.HasPrefix(pe.Code, "57P"):
			return ReasonShuttingDown
		case pe.Code == "57014": // statement timeout
			return ReasonTimeout
		}
		return ""
	case errors.As(err, &dns):
		return ReasonDNSError
	case errors.As(err, &se):
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return ReasonLocked
		// Not SQLITE_CORRUPT: a damaged file does not mend itself, so
		// it is an error to raise, not an outage to wait out.
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_FULL:
			return ReasonUnopenable
		case sqlite3.SQLITE_INTERRUPT:
			return ReasonTimeout
		}
		return ""
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonConnRefused
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ReasonConnLost
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ReasonTimeout
	}
	if strings.Contains(err.Error(), "password authentication failed") {
		return ReasonAuthFailed
	}
	if strings.Contains(err.Error(), "interrupted") {
		return ReasonTimeout
	}
	if connLost.MatchString(err.Error()) {
		return ReasonConnLost
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return ReasonConnLost
	}
	return ""
}
