package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestCredentialsBodyStrict: PUT /transcode/credentials reads its body as
// strictly as POST /transcode: unknown fields, names repeated or spelt in
// another case (encoding/json would fold them onto a field), data after the
// object, wrong types, empty or non-UTF-8 secrets and an oversized body are
// refused with the API's error shape naming the field, the job's
// credential_version does not move, and no secret reaches the answer or
// the log.
func TestCredentialsBodyStrict(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		e := start(t, db)
		key := e.requester()
		owner := requesterID(t, e, key)
		id := uuid.NewString()
		if err := e.inbox.Enqueue(ctx, inbox.NewJob{ID: id, RequesterID: owner,
			Source: inbox.Source{Bucket: "in", Key: "k"}, Output: inbox.Output{Bucket: "out", Prefix: "p/"},
			Renditions:  []inbox.Rendition{{Name: "o", Codec: "opus"}},
			Credentials: credentials.Storage{Source: &credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}, Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}}}); err != nil {
			t.Fatal(err)
		}
		creds := `{"access_key_id":"a","secret_access_key":"` + secret + `"}`
		good := `{"source":{"credentials":` + creds + `},"output":{"credentials":` + creds + `}}`
		swap := func(old, new string) string {
			if !strings.Contains(good, old) {
				t.Fatalf("%q not in the body", old)
			}
			return strings.Replace(good, old, new, 1)
		}
		cases := []struct {
			name, body string
			status     int
			code       string
			field      string // the error message starts with it
		}{
			{"unknown top-level field", swap(`{"source":`, `{"priority":1,"source":`), 400, "invalid_request", "priority"},
			{"unknown credential field", swap(`"access_key_id":"a"`, `"access_key_id":"a","role_arn":"x"`), 400, "invalid_request", "role_arn"},
			{"repeated secret", swap(`"secret_access_key":"`+secret+`"`, `"secret_access_key":"`+secret+`","secret_access_key":"`+secret+`"`), 400, "invalid_request", "body"},
			{"repeated object merged", swap(`"output":`, `"output":{"credentials":{"access_key_id":"b"}},"output":`), 400, "invalid_request", "body"},
			{"field in capitals", swap(`"output":`, `"OUTPUT":`), 400, "invalid_request", "OUTPUT"},
			{"nested field in capitals", swap(`"secret_access_key":`, `"Secret_Access_Key":`), 400, "invalid_request", "Secret_Access_Key"},
			{"field with a folding letter", swap(`"source":`, `"ſource":`), 400, "invalid_request", "ſource"},
			{"trailing object", good + `{}`, 400, "invalid_request", "body"},
			{"trailing brace", good + `}`, 400, "invalid_request", "body"},
			{"trailing word", good + ` x`, 400, "invalid_request", "body"},
			{"wrong type", swap(`"access_key_id":"a"`, `"access_key_id":1`), 400, "invalid_request", "source.credentials.access_key_id"},
			{"source an array", `{"source":[],"output":{"credentials":` + creds + `}}`, 400, "invalid_request", "source"},
			{"not an object", `[` + good + `]`, 400, "invalid_request", "body"},
			{"null", `null`, 400, "invalid_request", "source"},
			{"empty access key", swap(`"access_key_id":"a"`, `"access_key_id":""`), 400, "invalid_request", "source.credentials.access_key_id"},
			{"blank secret", swap(`"secret_access_key":"`+secret+`"`, `"secret_access_key":"  "`), 400, "invalid_request", "source.credentials.secret_access_key"},
			{"empty url", `{"source":{"url":""},"output":{"credentials":` + creds + `}}`, 400, "invalid_request", "source"},
			// Decoding would fold these into U+FFFD: the requester's secret
			// would be sealed altered.
			{"latin-1 secret", swap(`"secret_access_key":"`+secret+`"`, "\"secret_access_key\":\"caf\xe9\""), 400, "invalid_request", "body"},
			{"lone surrogate in a secret", swap(`"secret_access_key":"`+secret+`"`, `"secret_access_key":"a\ud800"`), 400, "invalid_request", "body"},
			{"NUL in a secret", swap(`"secret_access_key":"`+secret+`"`, `"secret_access_key":"a\u0000"`), 400, "invalid_request", "body"},
			{"oversized", swap(`"access_key_id":"a"`, `"access_key_id":"`+strings.Repeat("a", 1<<20)+`"`), 413, "body_too_large", "request body"},
		}
		for _, tc := range cases {
			r := e.do("PUT", "/transcode/credentials?job_id="+id, key, "", tc.body)
			errBody, _ := r.Body["error"].(map[string]any)
			code, _ := errBody["code"].(string)
			msg, _ := errBody["message"].(string)
			if r.Code != tc.status || code != tc.code || !strings.HasPrefix(msg, tc.field+" ") {
				t.Errorf("%s: %d %s, want %d %s naming %s", tc.name, r.Code, r.Raw, tc.status, tc.code, tc.field)
			}
			if strings.Contains(r.Raw, secret) {
				t.Errorf("%s: error leaks the secret", tc.name)
			}
		}
		if v, err := e.inbox.CredentialVersion(ctx, id); err != nil || v != 1 {
			t.Fatalf("credential_version %d (%v) after refused bodies, want 1", v, err)
		}
		if r := e.do("PUT", "/transcode/credentials?job_id="+id, key, "", good); r.Code != 200 {
			t.Fatalf("the valid body: %d %s", r.Code, r.Raw)
		}
		if strings.Contains(e.logs.String(), secret) {
			t.Fatal("log leaks the secret")
		}
	})
}

// requesterID is the id of the requester whose API key is key.
func requesterID(t testing.TB, e *env, key string) string {
	t.Helper()
	r, err := e.reqs.Authenticate(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}
