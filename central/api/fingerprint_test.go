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

// otherObject is the 400 message of a refresh that names another object.
const otherObject = "the credentials do not fit the job's source: the URL names another object than the job's source (only its signature parameters may change)"

// TestCredentialRefreshNeedsNoKeyring: PUT /transcode/credentials judges a
// refresh by the job row alone. Jobs sealed under a keyring the API does
// not hold (only the worker opens credentials) take a renewed signature or
// new bucket credentials, and still refuse another object, the other kind
// of source, or a body that tries to move the output, with the same status
// codes and messages as before; a refused refresh leaves
// credential_version as it was and no secret reaches an answer or the log.
func TestCredentialRefreshNeedsNoKeyring(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		e := start(t, db)
		key := e.requester()
		owner := requesterID(t, e, key)
		sealKeys, err := credentials.ParseKeyring("k0:"+credentials.NewKey(), "")
		if err != nil {
			t.Fatal(err)
		}
		sealer := inbox.New(db, sealKeys, inbox.DefaultPolicy())
		out := credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}
		urlJob, bucketJob := uuid.NewString(), uuid.NewString()
		for _, j := range []inbox.NewJob{
			{ID: urlJob, Source: inbox.Source{URL: "https://s3.example.com/in/a.wav"},
				Credentials: credentials.Storage{SourceURL: "https://s3.example.com/in/a.wav?versionId=7&X-Amz-Signature=old", Output: out}},
			{ID: bucketJob, Source: inbox.Source{Bucket: "in", Key: "a.wav"},
				Credentials: credentials.Storage{Source: &out, Output: out}},
		} {
			j.RequesterID, j.Output, j.Renditions = owner, inbox.Output{Bucket: "out", Prefix: "p/"}, []inbox.Rendition{{Name: "o", Codec: "opus"}}
			if err := sealer.Enqueue(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		creds := `{"access_key_id":"a","secret_access_key":"` + secret + `"}`
		output := `"output":{"credentials":` + creds + `}`
		cases := []struct {
			name, job, body string
			status          int
			message         string // the whole error message, or a part of it after "~"
		}{
			{"renewed signature", urlJob, `{"source":{"url":"https://s3.example.com/in/a.wav?X-Amz-Signature=` + secret + `&versionId=7"},` + output + `}`, 200, ""},
			{"renewed again", urlJob, `{"source":{"url":"https://s3.example.com/in/a.wav?versionId=7&X-Amz-Signature=` + secret + `2"},` + output + `}`, 200, ""},
			{"another version", urlJob, `{"source":{"url":"https://s3.example.com/in/a.wav?versionId=8&X-Amz-Signature=` + secret + `"},` + output + `}`, 400, otherObject},
			{"another key", urlJob, `{"source":{"url":"https://s3.example.com/in/b.wav?versionId=7&X-Amz-Signature=` + secret + `"},` + output + `}`, 400, otherObject},
			{"bucket credentials for a url source", urlJob, `{"source":{"credentials":` + creds + `},` + output + `}`, 400,
				"the credentials do not fit the job's source: the job fetches its source from a URL; send a new URL for it, not credentials"},
			{"another output bucket", urlJob, `{"source":{"url":"https://s3.example.com/in/a.wav?versionId=7&X-Amz-Signature=` + secret + `"},"output":{"bucket":"elsewhere","credentials":` + creds + `}}`, 400, "~bucket"},
			{"new bucket credentials", bucketJob, `{"source":{"credentials":` + creds + `},` + output + `}`, 200, ""},
			{"url for a bucket source", bucketJob, `{"source":{"url":"https://s3.example.com/in/a.wav?X-Amz-Signature=` + secret + `"},` + output + `}`, 400,
				"the credentials do not fit the job's source: the job reads its source from a bucket; send source credentials, not a URL"},
			{"another output bucket, bucket source", bucketJob, `{"source":{"credentials":` + creds + `},"output":{"bucket":"elsewhere","credentials":` + creds + `}}`, 400, "~bucket"},
		}
		versions := map[string]int{urlJob: 1, bucketJob: 1}
		for _, tc := range cases {
			r := e.do("PUT", "/transcode/credentials?job_id="+tc.job, key, "", tc.body)
			if r.Code != tc.status || strings.Contains(r.Raw, secret) {
				t.Fatalf("%s: %d %s, want %d", tc.name, r.Code, r.Raw, tc.status)
			}
			if r.Code == 200 {
				versions[tc.job]++
				if r.Body["credential_version"] != float64(versions[tc.job]) {
					t.Fatalf("%s: %s, want credential_version %d", tc.name, r.Raw, versions[tc.job])
				}
				continue
			}
			apiErr, _ := r.Body["error"].(map[string]any)
			msg, _ := apiErr["message"].(string)
			if apiErr["code"] != "invalid_request" ||
				(strings.HasPrefix(tc.message, "~") && !strings.Contains(msg, tc.message[1:])) ||
				(!strings.HasPrefix(tc.message, "~") && msg != tc.message) {
				t.Fatalf("%s: %s, want invalid_request %q", tc.name, r.Raw, tc.message)
			}
		}
		for id, want := range versions {
			if v, err := e.inbox.CredentialVersion(ctx, id); err != nil || v != want {
				t.Fatalf("%s at credential_version %d (%v), want %d", id, v, err, want)
			}
		}
		if strings.Contains(e.logs.String(), secret) {
			t.Fatal("log leaks the secret")
		}
	})
}

// TestCredentialRefreshOfPreMigrationJob: a URL job enqueued before jobs
// carried a source fingerprint is judged by its sealed URL, with the same
// answers; the first accepted refresh stores its fingerprint.
func TestCredentialRefreshOfPreMigrationJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		e := start(t, db)
		key := e.requester()
		id := uuid.NewString()
		if err := e.inbox.Enqueue(ctx, inbox.NewJob{ID: id, RequesterID: requesterID(t, e, key),
			Source: inbox.Source{URL: "https://dl.example.com/get"}, Output: inbox.Output{Bucket: "out", Prefix: "p/"},
			Renditions:  []inbox.Rendition{{Name: "o", Codec: "opus"}},
			Credentials: credentials.Storage{SourceURL: "https://dl.example.com/get?file=A&sig=old", Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(db.Rebind(`UPDATE inbox_jobs SET source_fingerprint = NULL WHERE id = ?`), id); err != nil {
			t.Fatal(err)
		}
		output := `"output":{"credentials":{"access_key_id":"a","secret_access_key":"` + secret + `"}}`
		put := func(u string) resp {
			return e.do("PUT", "/transcode/credentials?job_id="+id, key, "", `{"source":{"url":"`+u+`"},`+output+`}`)
		}
		if r := put("https://dl.example.com/get?file=B&sig=" + secret); r.Code != 400 || !strings.Contains(r.Raw, otherObject) {
			t.Fatalf("another object: %d %s", r.Code, r.Raw)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs WHERE id = ? AND source_fingerprint IS NULL`, id); n != 1 {
			t.Fatal("a refused refresh wrote a fingerprint")
		}
		if r := put("https://dl.example.com/get?sig=" + secret + "&file=A"); r.Code != 200 {
			t.Fatalf("renewed signature: %d %s", r.Code, r.Raw)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs WHERE id = ? AND source_fingerprint IS NOT NULL AND credential_version = 2`, id); n != 1 {
			t.Fatal("the accepted refresh wrote no fingerprint")
		}
		if r := put("https://dl.example.com/get?file=B&sig=" + secret); r.Code != 400 || !strings.Contains(r.Raw, otherObject) {
			t.Fatalf("another object after the fingerprint: %d %s", r.Code, r.Raw)
		}
		if strings.Contains(e.logs.String(), secret) {
			t.Fatal("log leaks the secret")
		}
	})
}
