package api_test

import (
	"net/http"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// FuzzTranscodeBody: POST /transcode with any body, from an authenticated
// requester, is answered below 500 (a 4xx naming the field, or 202) and
// never panics the server.
func FuzzTranscodeBody(f *testing.F) {
	db := sqltest.Open(f, sqldb.SQLite, schema.Migrations())
	e := start(f, db)
	key := e.requester()
	for _, seed := range []string{js(validBody()), `{}`, `[]`, `null`, `{"source":{}}`, `{"renditions":[{"name":"a"}]}`,
		`{"source":{"url":"https://x/y"},"output":{"bucket":"b","credentials":{}},"renditions":[]} x`, "\xff"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if err := testsvc.PostNo5xx(t, e.url+"/transcode", http.Header{"Authorization": {"Bearer " + key}}, body); err != nil {
			t.Fatal(err)
		}
	})
}
