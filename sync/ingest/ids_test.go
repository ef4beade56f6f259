package ingest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// An edge id no edge can have is refused as unknown before the database
// is asked: Postgres refuses invalid UTF-8 in a query, and that failure
// would answer 503 (retry later) and log a warning per request.
func TestMalformedEdgeIDIsUnauthorized(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		s := startServer(t, db)
		for _, id := range []string{"caf\xe9", strings.Repeat("e", 129), "a b", "a/b"} {
			for _, path := range []string{wire.BatchPath, wire.HeartbeatPath} {
				res := s.send(signRaw(t, path, id, wire.Compress([]byte(`{}`)), []byte("secret"), time.Now()))
				if res.status != http.StatusUnauthorized || res.code() != wire.CodeUnauthorized {
					t.Fatalf("%s %q: %d %s", path, id, res.status, res.body)
				}
			}
		}
		if strings.Contains(s.logs.String(), "sync request failed") {
			t.Fatalf("logged as a failure: %s", s.logs.String())
		}
	})
}

// An id in an operator API path is text from the URL: one that is not
// valid text (%FF, %00) names no edge or job, and is not a server error.
func TestOperatorAPIPathIDsThatAreNotTextAreNotFound(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		s := startServer(t, db)
		edge, _ := s.register("e")
		for _, path := range []string{
			"/v1/edges/%FF", "/v1/edges/a%00b",
			"/v1/edges/%FF/jobs",
			"/v1/edges/" + edge + "/jobs/%FF/events", "/v1/edges/" + edge + "/jobs/a%00b/events",
		} {
			if res := s.get(path, nil); res.status != http.StatusNotFound {
				t.Fatalf("%s: %d %s", path, res.status, res.body)
			}
		}
	})
}
