package api_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/daemon/testsvc"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// transcodeSeeds are bodies of POST /transcode the fuzzers start from.
func transcodeSeeds() []string {
	meta := func(m string) string {
		return strings.Replace(js(withMetadata(validBody(), map[string]any{"t": "MARK"})), `{"t":"MARK"}`, m, 1)
	}
	return []string{js(validBody()), `{}`, `[]`, `null`, `{"source":{}}`, `{"renditions":[{"name":"a"}]}`,
		`{"source":{"url":"https://x/y"},"output":{"bucket":"b","credentials":{}},"renditions":[]} x`, "\xff",
		meta(`{"n":1e-300}`), meta(`{"a":[[[{"b":[0.5]}]]]}`), meta(`{"s":"\u00e9\ud83c\udfb5"}`)}
}

// FuzzTranscodeBody: POST /transcode with any body, from an authenticated
// requester, is answered below 500 (a 4xx naming the field, or 202) and
// never panics the server.
func FuzzTranscodeBody(f *testing.F) {
	fuzzTranscodeBody(f, sqldb.SQLite)
}

// FuzzTranscodeBodyPostgres is FuzzTranscodeBody on Postgres, whose text,
// jsonb and numeric refuse values SQLite stores: what the API accepts must
// be storable there too.
func FuzzTranscodeBodyPostgres(f *testing.F) {
	fuzzTranscodeBody(f, sqldb.Postgres)
}

func fuzzTranscodeBody(f *testing.F, engine sqldb.Engine) {
	db := sqltest.Open(f, engine, schema.Migrations())
	e := start(f, db)
	key := e.requester()
	for _, seed := range transcodeSeeds() {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if err := testsvc.PostNo5xx(t, e.url+"/transcode", http.Header{"Authorization": {"Bearer " + key}}, body); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzCredentialsBody: PUT /transcode/credentials with any body, for a
// live job of the requester, is answered 200 or a 4xx, never a 500, and
// no answer quotes the secret the seeds carry.
func FuzzCredentialsBody(f *testing.F) {
	db := sqltest.Open(f, sqldb.Postgres, schema.Migrations())
	e := start(f, db)
	key := e.requester()
	id := uuid.NewString()
	if err := e.inbox.Enqueue(context.Background(), inbox.NewJob{ID: id, RequesterID: requesterID(f, e, key),
		Source: inbox.Source{Bucket: "in", Key: "k"}, Output: inbox.Output{Bucket: "out", Prefix: "p/"},
		Renditions:  []inbox.Rendition{{Name: "o", Codec: "opus"}},
		Credentials: credentials.Storage{Source: &credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}, Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}}}); err != nil {
		f.Fatal(err)
	}
	creds := `{"access_key_id":"a","secret_access_key":"` + secret + `","session_token":"` + secret + `","expires_at":"2999-01-01T00:00:00Z"}`
	for _, seed := range []string{`{"source":{"credentials":` + creds + `},"output":{"credentials":` + creds + `}}`,
		`{"source":{"url":"https://x/y"},"output":{"credentials":` + creds + `}}`, `{}`, `null`, `[]`, "\xff",
		`{"source":{"credentials":{"access_key_id":"a","secret_access_key":"` + secret + `","expires_at":"x` + secret + `"}}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := http.NewRequest(http.MethodPut, e.url+"/transcode/credentials?job_id="+id, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 || res.StatusCode != http.StatusOK && bytes.Contains(raw, []byte(secret)) {
			t.Fatalf("body %q answered %d: %s", body, res.StatusCode, raw)
		}
	})
}
