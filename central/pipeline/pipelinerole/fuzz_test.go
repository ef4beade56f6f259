package pipelinerole

import (
	"net/http"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// FuzzSubmitBody: POST /v1/pipeline/jobs with any body, from an operator,
// is answered below 500 (202, 400 INVALID_MESSAGE or 413) and never panics.
func FuzzSubmitBody(f *testing.F) {
	db := sqltest.Open(f, sqldb.SQLite, sets...)
	s := newServer(f, db, testConfig())
	for _, seed := range []string{`{"job_type":"edge_daily","symbol":"edge-1","asof":"2026-01-02"}`,
		`{"job_type":"edge_daily","symbol":"../x","asof":"2026-01-02"}`, `{"job_type":"nope"}`, `{}`, `[]`, `null`,
		`{"job_type":"edge_daily","symbol":"e","asof":"2026-02-30"}`, "\xff"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if err := testsvc.PostNo5xx(t, s.url+"/v1/pipeline/jobs", http.Header{"Authorization": {"Bearer " + s.token}}, body); err != nil {
			t.Fatal(err)
		}
	})
}
