package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/api"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/idempotency"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestUpdateCredentials covers PUT /transcode/credentials on both engines:
// the owner's update seals the new set and advances credential_version;
// another requester's job is a 404 like an unknown job, a finished job 409, a
// bad body 400, no API key 401; secrets never appear in a response or log.
func TestUpdateCredentials(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		keys, err := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
		if err != nil {
			t.Fatal(err)
		}
		in := inbox.New(db, keys, inbox.DefaultPolicy())
		reqs := requesters.New(db, keys)
		owner, _ := reqs.Create(ctx, "owner")
		other, _ := reqs.Create(ctx, "other")
		var logs testsvc.LogBuffer
		log := slog.New(slog.NewJSONHandler(&logs, nil))
		e := daemon.NewEcho(log)
		api.New(api.Config{DB: db, Inbox: in, Requesters: reqs, Idempotency: idempotency.New(db, time.Hour, time.Now), Log: log}).Mount(e)
		srv := httptest.NewServer(e)
		defer srv.Close()

		enqueue := func() string {
			id := uuid.NewString()
			err := in.Enqueue(ctx, inbox.NewJob{ID: id, RequesterID: owner.RequesterID,
				Source: inbox.Source{Bucket: "in", Key: "k"}, Output: inbox.Output{Bucket: "out", Prefix: "p/"},
				Renditions:  []inbox.Rendition{{Name: "o", Codec: "opus"}},
				Credentials: credentials.Storage{Source: &credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}, Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}}})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		const planted = "NEW-SECRET-1b2c3d4e"
		good := `{"source":{"credentials":{"access_key_id":"a","secret_access_key":"` + planted + `"}},"output":{"credentials":{"access_key_id":"a","secret_access_key":"` + planted + `"}}}`
		put := func(key, id, body string) (int, string) {
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/transcode/credentials?job_id="+id, strings.NewReader(body))
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}

		id := enqueue()
		finished := enqueue()
		jobs, err := in.Claim(ctx, "w", 2, time.Minute)
		if err != nil || len(jobs) != 2 {
			t.Fatalf("claim: %v", err)
		}
		for _, j := range jobs {
			if j.ID == finished {
				if _, err := in.Fail(ctx, j, inbox.JobError{Class: inbox.Permanent, Code: "invalid_media", Message: "x"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		cases := []struct {
			name, key, id, body string
			status              int
			code                string
		}{
			{"owner", owner.APIKey, id, good, 200, ""},
			{"owner again", owner.APIKey, id, good, 200, ""},
			{"signed url for a bucket source", owner.APIKey, id, `{"source":{"url":"https://s3.example/in/k?X-Amz-Signature=` + planted + `"},"output":{"credentials":{"access_key_id":"a","secret_access_key":"` + planted + `"}}}`, 400, "invalid_request"},
			{"other requester", other.APIKey, id, good, 404, "not_found"},
			{"other requester, finished job", other.APIKey, finished, good, 404, "not_found"},
			{"unknown job", owner.APIKey, uuid.NewString(), good, 404, "not_found"},
			{"not a uuid", owner.APIKey, "nope", good, 404, "not_found"},
			{"finished job", owner.APIKey, finished, good, 409, "job_finished"},
			{"no api key", "", id, good, 401, "unauthorized"},
			{"not json", owner.APIKey, id, `{`, 400, "invalid_request"},
			{"no output", owner.APIKey, id, `{"source":{"credentials":{"access_key_id":"a","secret_access_key":"s"}}}`, 400, "invalid_request"},
			{"both source kinds", owner.APIKey, id, `{"source":{"url":"https://x/y","credentials":{"access_key_id":"a","secret_access_key":"s"}},"output":{"credentials":{"access_key_id":"a","secret_access_key":"s"}}}`, 400, "invalid_request"},
			{"empty secret", owner.APIKey, id, `{"source":{"credentials":{"access_key_id":"a","secret_access_key":""}},"output":{"credentials":{"access_key_id":"a","secret_access_key":"s"}}}`, 400, "invalid_request"},
		}
		version := 1
		for _, tc := range cases {
			status, body := put(tc.key, tc.id, tc.body)
			if status != tc.status {
				t.Fatalf("%s: HTTP %d %s, want %d", tc.name, status, body, tc.status)
			}
			if strings.Contains(body, planted) {
				t.Fatalf("%s: response leaks the secret: %s", tc.name, body)
			}
			if status == 200 {
				version++
				var got api.CredentialsUpdated
				if err := json.Unmarshal([]byte(body), &got); err != nil || got.JobID != tc.id || got.CredentialVersion != version {
					t.Fatalf("%s: body %s, want version %d", tc.name, body, version)
				}
				continue
			}
			var apiErr struct {
				Error struct{ Code string } `json:"error"`
			}
			if json.Unmarshal([]byte(body), &apiErr); apiErr.Error.Code != tc.code {
				t.Fatalf("%s: body %s, want code %s", tc.name, body, tc.code)
			}
		}
		// The runner opens what the requester sent, sealed under the new version.
		for _, j := range jobs {
			if j.ID != id {
				continue
			}
			st, v, err := in.Credentials(ctx, j)
			if err != nil || v != version || st.Output.SecretAccessKey != planted || st.Source == nil || st.Source.SecretAccessKey != planted || st.SourceURL != "" {
				t.Fatalf("credentials after update: v=%d err=%v", v, err)
			}
		}

		// A refresh renews access to the job's source, never changes it: a
		// URL job takes a new signature for the same object, nothing else.
		urlJob := uuid.NewString()
		if err := in.Enqueue(ctx, inbox.NewJob{ID: urlJob, RequesterID: owner.RequesterID,
			Source: inbox.Source{URL: "https://s3.example/in/k"}, Output: inbox.Output{Bucket: "out", Prefix: "p/"},
			Renditions:  []inbox.Rendition{{Name: "o", Codec: "opus"}},
			Credentials: credentials.Storage{SourceURL: "https://s3.example/in/k?X-Amz-Signature=old", Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}}}); err != nil {
			t.Fatal(err)
		}
		out := `"output":{"credentials":{"access_key_id":"a","secret_access_key":"s"}}`
		for _, tc := range []struct {
			name, source string
			status       int
		}{
			{"new signature for the same object", `{"url":"https://s3.example/in/k?X-Amz-Signature=` + planted + `"}`, 200},
			{"another object", `{"url":"https://s3.example/in/other?X-Amz-Signature=` + planted + `"}`, 400},
			{"another host", `{"url":"https://evil.example/in/k?X-Amz-Signature=` + planted + `"}`, 400},
			// The query names the object too: only signature parameters may change.
			{"another version of the object", `{"url":"https://s3.example/in/k?versionId=2&X-Amz-Signature=` + planted + `"}`, 400},
			{"a response override", `{"url":"https://s3.example/in/k?response-content-type=text%2Fhtml&X-Amz-Signature=` + planted + `"}`, 400},
			{"bucket credentials for a url source", `{"credentials":{"access_key_id":"a","secret_access_key":"s"}}`, 400},
		} {
			status, body := put(owner.APIKey, urlJob, `{"source":`+tc.source+`,`+out+`}`)
			if status != tc.status || strings.Contains(body, planted) {
				t.Fatalf("%s: HTTP %d %s, want %d", tc.name, status, body, tc.status)
			}
			if status == 400 && !strings.Contains(body, `"invalid_request"`) {
				t.Fatalf("%s: %s, want invalid_request", tc.name, body)
			}
		}
		if v, err := in.CredentialVersion(ctx, urlJob); err != nil || v != 2 {
			t.Fatalf("url job at credential_version %d (%v), want 2: only the fitting update counts", v, err)
		}
		if bytes.Contains([]byte(logs.String()), []byte(planted)) {
			t.Fatal("log leaks the secret")
		}
	})
}

// TestConcurrentCredentialUpdates: many PUTs for one job at once each
// answer 200 or 409 credentials_conflict (never 500); every 200 carries a
// distinct version and the final version counts exactly the 200s.
func TestConcurrentCredentialUpdates(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		keys, err := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
		if err != nil {
			t.Fatal(err)
		}
		in := inbox.New(db, keys, inbox.DefaultPolicy())
		reqs := requesters.New(db, keys)
		owner, _ := reqs.Create(ctx, "owner")
		log := slog.New(slog.NewJSONHandler(io.Discard, nil))
		e := daemon.NewEcho(log)
		api.New(api.Config{DB: db, Inbox: in, Requesters: reqs, Idempotency: idempotency.New(db, time.Hour, time.Now), Log: log}).Mount(e)
		srv := httptest.NewServer(e)
		defer srv.Close()
		id := uuid.NewString()
		err = in.Enqueue(ctx, inbox.NewJob{ID: id, RequesterID: owner.RequesterID,
			Source: inbox.Source{Bucket: "in", Key: "k"}, Output: inbox.Output{Bucket: "out", Prefix: "p/"},
			Renditions:  []inbox.Rendition{{Name: "o", Codec: "opus"}},
			Credentials: credentials.Storage{Source: &credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}, Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "old"}}})
		if err != nil {
			t.Fatal(err)
		}
		body := `{"source":{"credentials":{"access_key_id":"a","secret_access_key":"s"}},"output":{"credentials":{"access_key_id":"a","secret_access_key":"s"}}}`
		const n = 24
		type answer struct {
			status int
			body   string
		}
		answers := make(chan answer, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				req, _ := http.NewRequest(http.MethodPut, srv.URL+"/transcode/credentials?job_id="+id, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+owner.APIKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				answers <- answer{resp.StatusCode, string(b)}
			}()
		}
		close(start)
		wg.Wait()
		close(answers)
		versions := map[int]bool{}
		for a := range answers {
			switch a.status {
			case http.StatusOK:
				var got api.CredentialsUpdated
				if err := json.Unmarshal([]byte(a.body), &got); err != nil || versions[got.CredentialVersion] {
					t.Fatalf("200 %s: duplicate or unreadable version", a.body)
				}
				versions[got.CredentialVersion] = true
			case http.StatusConflict:
				if !strings.Contains(a.body, `"credentials_conflict"`) {
					t.Fatalf("409 %s", a.body)
				}
			default:
				t.Fatalf("HTTP %d %s", a.status, a.body)
			}
		}
		if v, err := in.CredentialVersion(ctx, id); err != nil || v != 1+len(versions) {
			t.Fatalf("final version %d with %d successful updates (%v)", v, len(versions), err)
		}
	})
}
