package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"

	"github.com/vesta-cx/euterpe/central/api"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/idempotency"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/ssrf"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

const secret = "PLANTED-SECRET-9f8e7d6c5b4a"

type env struct {
	t     testing.TB
	db    *sqldb.DB
	url   string
	inbox *inbox.Store
	reqs  *requesters.Store
	logs  *testsvc.LogBuffer
	clock *clock
}

type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

func start(t testing.TB, db *sqldb.DB) *env {
	t.Helper()
	return startWith(t, db, func(u string) error {
		if strings.Contains(u, "169.254.") {
			return fmt.Errorf("address refused")
		}
		return nil
	})
}

// startWith is start with checkURL as the API's address policy.
func startWith(t testing.TB, db *sqldb.DB, checkURL func(string) error) *env {
	t.Helper()
	keys, err := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testsvc.LogBuffer{}
	log, _ := daemon.NewLogger(logs, "debug")
	clk := &clock{}
	e := &env{t: t, db: db, logs: logs, clock: clk,
		inbox: inbox.New(db, keys, inbox.DefaultPolicy(), inbox.WithClock(clk.Now)),
		reqs:  requesters.New(db, keys)}
	echo := daemon.NewEcho(log)
	api.New(api.Config{DB: db, Inbox: e.inbox, Requesters: e.reqs, Log: log,
		Idempotency: idempotency.New(db, time.Hour, clk.Now),
		CheckURL:    checkURL}).Mount(echo)
	ln, err := daemon.Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := daemon.NewHTTPServer(echo)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = daemon.ServeUntil(ctx, srv, ln, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	e.url = "http://" + ln.Addr().String()
	return e
}

func (e *env) requester() string {
	c, err := e.reqs.Create(context.Background(), "r")
	if err != nil {
		e.t.Fatal(err)
	}
	return c.APIKey
}

type resp struct {
	Code int
	Body map[string]any
	Raw  string
}

func (e *env) do(method, path, key, idem, body string) resp {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	r := resp{Code: res.StatusCode, Raw: string(raw)}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}

func validBody() map[string]any {
	return map[string]any{
		"source": map[string]any{"bucket": "in", "key": "song.wav", "region": "auto",
			"credentials": map[string]any{"access_key_id": "AKIASRC", "secret_access_key": secret, "session_token": secret}},
		"output": map[string]any{"bucket": "out", "prefix": "jobs/1/",
			"credentials": map[string]any{"access_key_id": "AKIAOUT", "secret_access_key": secret}},
		"renditions":         []any{map[string]any{"name": "hi", "codec": "opus", "bitrate_kbps": 128}},
		"status_webhook_url": "https://hooks.example.com/euterpe",
		"refresh_url":        "https://api.example.com/refresh",
		"metadata":           map[string]any{"track_id": "t-1"},
	}
}

func withMetadata(b map[string]any, m map[string]any) map[string]any {
	b["metadata"] = m
	return b
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func eachEngine(t *testing.T, body func(t *testing.T, db *sqldb.DB)) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, body)
}

func count(t *testing.T, db *sqldb.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(db.Rebind(q), args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Idempotency-Key is 1–255 printable ASCII characters (0x20–0x7E): a space
// inside a key is printable and taken; a tab, non-ASCII or 256 characters
// are refused before anything is written.
func TestIdempotencyKeyCharacters(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		body := js(validBody())
		for _, tc := range []struct {
			name, idem string
			want       int
		}{
			{"plain", "order-41", 202},
			{"space inside", "order 42", 202},
			{"every printable", "x !\"#$%&'()*+,-./0123456789:;<=>?@AZ[\\]^_`az{|}~x", 202},
			{"255 characters", strings.Repeat("k", 255), 202},
			{"256 characters", strings.Repeat("k", 256), 400},
			{"tab inside", "order\t43", 400},
			{"non-ASCII", "commande-é", 400},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := e.do("POST", "/transcode", key, tc.idem, body)
				if r.Code != tc.want || (tc.want == 400 && !strings.Contains(r.Raw, `"invalid_idempotency_key"`)) {
					t.Fatalf("%q: %d %s", tc.idem, r.Code, r.Raw)
				}
				if tc.want == 202 {
					// The key is the one stored: a replay finds the same job.
					if again := e.do("POST", "/transcode", key, tc.idem, body); again.Code != 202 || again.Body["job_id"] != r.Body["job_id"] {
						t.Fatalf("replay of %q: %d %s", tc.idem, again.Code, again.Raw)
					}
				}
			})
		}
	})
}

func TestEnqueueStatusAuthAndIdempotency(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key, other := e.requester(), e.requester()
		body := js(validBody())

		r := e.do("POST", "/transcode", key, "k-1", body)
		if r.Code != 202 || r.Body["status"] != "queued" || r.Body["job_id"] == "" {
			t.Fatalf("enqueue: %d %s", r.Code, r.Raw)
		}
		job := r.Body["job_id"].(string)
		// Same key, same request (credentials renewed): same job.
		b2 := validBody()
		b2["output"].(map[string]any)["credentials"].(map[string]any)["secret_access_key"] = "renewed"
		if r2 := e.do("POST", "/transcode", key, "k-1", js(b2)); r2.Code != 202 || r2.Body["job_id"] != job {
			t.Fatalf("replay: %d %s", r2.Code, r2.Raw)
		}
		// Same key, different request: conflict.
		b3 := validBody()
		b3["renditions"] = []any{map[string]any{"name": "lo", "codec": "mp3"}}
		if r3 := e.do("POST", "/transcode", key, "k-1", js(b3)); r3.Code != 409 || !strings.Contains(r3.Raw, "idempotency_conflict") {
			t.Fatalf("conflict: %d %s", r3.Code, r3.Raw)
		}
		// The same key is a different scope for another requester.
		if r4 := e.do("POST", "/transcode", other, "k-1", body); r4.Code != 202 || r4.Body["job_id"] == job {
			t.Fatalf("other requester's key: %d %s", r4.Code, r4.Raw)
		}
		for name, tc := range map[string]struct {
			method, path, key, idem string
			want                    int
		}{
			"no idempotency key": {"POST", "/transcode", key, "", 400},
			"no auth":            {"POST", "/transcode", "", "k-2", 401},
			"unknown key":        {"POST", "/transcode", "eut_nope", "k-2", 401},
			"status no auth":     {"GET", "/transcode/status?job_id=" + job, "", "", 401},
			"status other":       {"GET", "/transcode/status?job_id=" + job, other, "", 404},
			"status unknown":     {"GET", "/transcode/status?job_id=6f1c2b1e-0000-4000-8000-000000000000", key, "", 404},
			"status missing id":  {"GET", "/transcode/status", key, "", 400},
		} {
			if r := e.do(tc.method, tc.path, tc.key, tc.idem, body); r.Code != tc.want {
				t.Errorf("%s: %d %s", name, r.Code, r.Raw)
			}
		}
		// Another requester's job reads exactly as a job that does not
		// exist: the answer must not tell that the id is taken.
		const unknown = "6f1c2b1e-0000-4000-8000-000000000000"
		notFound := e.do("GET", "/transcode/status?job_id="+unknown, other, "", "")
		if r := e.do("GET", "/transcode/status?job_id="+job, other, "", ""); r.Raw != strings.ReplaceAll(notFound.Raw, unknown, job) {
			t.Fatalf("another requester's job: %d %s, want the unknown job's answer %s", r.Code, r.Raw, notFound.Raw)
		}
		s := e.do("GET", "/transcode/status?job_id="+job, key, "", "")
		if s.Code != 200 || s.Body["status"] != "queued" || s.Body["attempt_count"] != 0.0 || s.Body["max_attempts"] != 5.0 ||
			s.Body["claim_version"] != 0.0 {
			t.Fatalf("status: %s", s.Raw)
		}
		// Run it to success with the test executor path; outputs appear.
		jobs, err := e.inbox.Claim(context.Background(), "w1", 10, time.Minute)
		if err != nil || len(jobs) != 2 {
			t.Fatalf("claim: %v %d", err, len(jobs))
		}
		if _, err := e.inbox.SucceedMany(context.Background(), jobs, []inbox.OutputFile{{Rendition: "hi", Bucket: "out", Key: "jobs/1/hi.ogg", SizeBytes: 42}}); err != nil {
			t.Fatal(err)
		}
		s = e.do("GET", "/transcode/status?job_id="+job, key, "", "")
		outs, _ := s.Body["outputs"].([]any)
		if s.Code != 200 || s.Body["status"] != "succeeded" || len(outs) != 1 || s.Body["worker_id"] != "w1" || s.Body["claim_version"] != 1.0 {
			t.Fatalf("status after success: %s", s.Raw)
		}
		// Retention prunes it: 410 for its owner, still 404 for others.
		e.clock.Add(time.Hour)
		if n, err := e.inbox.Prune(context.Background(), e.clock.Now()); err != nil || n != 2 {
			t.Fatalf("prune: %d %v", n, err)
		}
		if r := e.do("GET", "/transcode/status?job_id="+job, key, "", ""); r.Code != 410 {
			t.Fatalf("pruned: %d %s", r.Code, r.Raw)
		}
		if r := e.do("GET", "/transcode/status?job_id="+job, other, "", ""); r.Code != 404 {
			t.Fatalf("pruned, other requester: %d", r.Code)
		}
		// Keys expire: after the TTL the same key creates a new job.
		e.clock.Add(2 * time.Hour)
		if r := e.do("POST", "/transcode", key, "k-1", js(b3)); r.Code != 202 || r.Body["job_id"] == job {
			t.Fatalf("expired key: %d %s", r.Code, r.Raw)
		}
	})
}

// Metadata numbers are hashed as written: integers past 2^53, which a
// float64 would merge, make different requests, so a reused key with the
// other one is a conflict, not a replay of the first job.
func TestMetadataNumbersHashedAsWritten(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		big := func(n string) string {
			return strings.Replace(js(withMetadata(validBody(), map[string]any{"track_id": "N"})), `"N"`, n, 1)
		}
		if r5 := e.do("POST", "/transcode", key, "k-big", big("9007199254740993")); r5.Code != 202 {
			t.Fatalf("big id: %d %s", r5.Code, r5.Raw)
		}
		if r6 := e.do("POST", "/transcode", key, "k-big", big("9007199254740992")); r6.Code != 409 {
			t.Fatalf("a different big id with the same key: %d %s", r6.Code, r6.Raw)
		}
		if r7 := e.do("POST", "/transcode", key, "k-big", big("9007199254740993")); r7.Code != 202 {
			t.Fatalf("the same big id again: %d %s", r7.Code, r7.Raw)
		}
	})
}

func TestInvalidBodiesWriteNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		mut := func(f func(m map[string]any)) string {
			m := validBody()
			f(m)
			return js(m)
		}
		cases := []struct {
			name, body, field string
		}{
			{"not json", `{"source":`, "body"},
			{"trailing data", js(validBody()) + `{}`, "body"},
			// json.Decoder.More answers false before a closing bracket.
			{"trailing brace", js(validBody()) + `}`, "body"},
			{"trailing bracket", js(validBody()) + ` ]`, "body"},
			{"unknown field", mut(func(m map[string]any) { m["priority"] = 3 }), "priority"},
			{"no source", mut(func(m map[string]any) { delete(m, "source") }), "source"},
			{"url and bucket", mut(func(m map[string]any) { m["source"].(map[string]any)["url"] = "https://x/y" }), "source"},
			{"source url scheme", mut(func(m map[string]any) { m["source"] = map[string]any{"url": "file:///etc/passwd"} }), "source.url"},
			{"no source key", mut(func(m map[string]any) { delete(m["source"].(map[string]any), "key") }), "source.key"},
			{"no source creds", mut(func(m map[string]any) { delete(m["source"].(map[string]any), "credentials") }), "source.credentials"},
			{"no secret key", mut(func(m map[string]any) {
				delete(m["source"].(map[string]any)["credentials"].(map[string]any), "secret_access_key")
			}), "source.credentials.secret_access_key"},
			{"expired creds", mut(func(m map[string]any) {
				m["output"].(map[string]any)["credentials"].(map[string]any)["expires_at"] = "2001-01-01T00:00:00Z"
			}), "output.credentials.expires_at"},
			{"no output", mut(func(m map[string]any) { delete(m, "output") }), "output"},
			{"no output bucket", mut(func(m map[string]any) { delete(m["output"].(map[string]any), "bucket") }), "output.bucket"},
			{"no output creds", mut(func(m map[string]any) { delete(m["output"].(map[string]any), "credentials") }), "output.credentials"},
			{"no renditions", mut(func(m map[string]any) { m["renditions"] = []any{} }), "renditions"},
			{"bad codec", mut(func(m map[string]any) { m["renditions"] = []any{map[string]any{"name": "a", "codec": "wma"}} }), "renditions[0].codec"},
			{"bad bitrate", mut(func(m map[string]any) {
				m["renditions"] = []any{map[string]any{"name": "a", "codec": "mp3", "bitrate_kbps": 999}}
			}), "renditions[0].bitrate_kbps"},
			{"bad sample rate", mut(func(m map[string]any) {
				m["renditions"] = []any{map[string]any{"name": "a", "codec": "opus", "sample_rate_hz": 44100}}
			}), "renditions[0].sample_rate_hz"},
			{"dup rendition", mut(func(m map[string]any) {
				m["renditions"] = []any{map[string]any{"name": "a", "codec": "flac"}, map[string]any{"name": "a", "codec": "mp3"}}
			}), "renditions[1].name"},
			{"wrong type", mut(func(m map[string]any) { m["renditions"] = "opus" }), "renditions"},
			{"webhook scheme", mut(func(m map[string]any) { m["status_webhook_url"] = "gopher://x" }), "status_webhook_url"},
			{"webhook relative", mut(func(m map[string]any) { m["status_webhook_url"] = "/hook" }), "status_webhook_url"},
			{"webhook policy", mut(func(m map[string]any) { m["status_webhook_url"] = "http://169.254.169.254/" }), "status_webhook_url"},
			{"refresh scheme", mut(func(m map[string]any) { m["refresh_url"] = "ftp://x/y" }), "refresh_url"},
			// Stored with the job and requested on every event: bounded like source.url.
			{"webhook too long", mut(func(m map[string]any) { m["status_webhook_url"] = "https://h.example/" + strings.Repeat("a", 8192) }), "status_webhook_url"},
			{"refresh too long", mut(func(m map[string]any) { m["refresh_url"] = "https://h.example/" + strings.Repeat("a", 8192) }), "refresh_url"},
			{"metadata array", mut(func(m map[string]any) { m["metadata"] = []any{1} }), "metadata"},
			// JSON carries these; Postgres text and jsonb refuse them.
			{"latin-1 metadata", strings.Replace(mut(func(m map[string]any) { m["metadata"] = map[string]any{"t": "cafe"} }), "cafe", "caf\xe9", 1), "body"},
			{"NUL in metadata", strings.Replace(mut(func(m map[string]any) { m["metadata"] = map[string]any{"t": "a-b"} }), "a-b", `a\u0000b`, 1), "body"},
			{"NUL in a key", strings.Replace(mut(func(m map[string]any) { m["output"].(map[string]any)["prefix"] = "a-b" }), "a-b", `a\u0000b`, 1), "body"},
			// A lone surrogate escape: jsonb refuses it, and Go decodes it
			// to U+FFFD, so \ud800 and \ud801 would share one hash.
			{"lone surrogate in metadata", strings.Replace(mut(func(m map[string]any) { m["metadata"] = map[string]any{"t": "a-b"} }), "a-b", `a\ud800b`, 1), "body"},
			{"lone surrogate in a metadata key", strings.Replace(mut(func(m map[string]any) { m["metadata"] = map[string]any{"a-b": 1} }), "a-b", `\udfff`, 1), "body"},
			{"high surrogate then not low", strings.Replace(mut(func(m map[string]any) { m["metadata"] = map[string]any{"t": "a-b"} }), "a-b", `\ud83c\u0041`, 1), "body"},
			{"lone surrogate in the prefix", strings.Replace(mut(func(m map[string]any) { m["output"].(map[string]any)["prefix"] = "a-b" }), "a-b", `a\uDC00`, 1), "body"},
		}
		for i, tc := range cases {
			r := e.do("POST", "/transcode", key, fmt.Sprintf("bad-%d", i), tc.body)
			if r.Code != 400 {
				t.Errorf("%s: %d %s", tc.name, r.Code, r.Raw)
				continue
			}
			msg, _ := r.Body["error"].(map[string]any)["message"].(string)
			if !strings.HasPrefix(msg, tc.field+" ") {
				t.Errorf("%s: message %q does not name %s", tc.name, msg, tc.field)
			}
			if strings.Contains(r.Raw, secret) {
				t.Errorf("%s: error leaks the secret", tc.name)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`) + count(t, db, `SELECT COUNT(*) FROM idempotency_keys`); n != 0 {
			t.Fatalf("invalid requests wrote %d rows", n)
		}
	})
}

// TestSurrogateEscapesThatPair: the lone-surrogate refusal leaves well-formed
// text alone — a surrogate pair (an emoji) and an escaped backslash followed
// by the letters "ud800" are accepted on both engines, stored and read back
// as sent.
func TestSurrogateEscapesThatPair(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		for i, tc := range []struct{ escaped, want string }{
			{`\ud83c\udfb5`, "\U0001F3B5"},
			{`\\ud800`, `\ud800`},
			{`\\\ud83c\udfb5`, "\\\U0001F3B5"},
		} {
			body := strings.Replace(js(withMetadata(validBody(), map[string]any{"t": "MARK"})), "MARK", tc.escaped, 1)
			r := e.do("POST", "/transcode", key, fmt.Sprintf("pair-%d", i), body)
			if r.Code != 202 {
				t.Fatalf("%s: %d %s", tc.escaped, r.Code, r.Raw)
			}
			s := e.do("GET", "/transcode/status?job_id="+r.Body["job_id"].(string), key, "", "")
			if got, _ := s.Body["metadata"].(map[string]any)["t"].(string); got != tc.want {
				t.Fatalf("%s: metadata read back as %q, want %q", tc.escaped, got, tc.want)
			}
		}
	})
}

func TestConcurrentIdenticalRequestsCreateOneJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		body := js(validBody())
		const n = 16
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := e.do("POST", "/transcode", key, "same-key", body)
				if r.Code != 202 {
					t.Errorf("request %d: %d %s", i, r.Code, r.Raw)
					return
				}
				ids[i], _ = r.Body["job_id"].(string)
			}()
		}
		wg.Wait()
		for _, id := range ids {
			if id != ids[0] {
				t.Fatalf("different job ids: %v", ids)
			}
		}
		if c := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`); c != 1 {
			t.Fatalf("%d jobs created", c)
		}
	})
}

// A secret planted in every credential field and in the signed URL's query
// appears in no response, log line, outbox payload or plaintext column.
func TestNoCredentialLeaks(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		signed := validBody()
		signed["source"] = map[string]any{"url": "https://media.example.com/a.wav?X-Amz-Credential=AK&X-Amz-Signature=" + secret}
		var jobs []string
		for i, b := range []map[string]any{validBody(), signed} {
			r := e.do("POST", "/transcode", key, fmt.Sprintf("leak-%d", i), js(b))
			if r.Code != 202 {
				t.Fatalf("enqueue: %s", r.Raw)
			}
			jobs = append(jobs, r.Body["job_id"].(string))
		}
		ctx := context.Background()
		claimed, _ := e.inbox.Claim(ctx, "w", 2, time.Minute)
		for _, j := range claimed {
			st, _, err := e.inbox.Credentials(ctx, j)
			if err != nil {
				t.Fatal(err)
			}
			if st.Output.SecretAccessKey != secret && !strings.Contains(st.SourceURL, secret) {
				t.Fatal("credentials did not round-trip")
			}
			_, _ = e.inbox.Fail(ctx, j, inbox.JobError{Class: inbox.Permanent, Code: "x", Message: "failed"})
		}
		var sources []string
		for _, id := range jobs {
			r := e.do("GET", "/transcode/status?job_id="+id, key, "", "")
			if strings.Contains(r.Raw, secret) {
				t.Fatalf("status leaks: %s", r.Raw)
			}
			var u *string
			_ = db.QueryRow(db.Rebind(`SELECT source_url FROM inbox_jobs WHERE id = ?`), id).Scan(&u)
			if u != nil {
				sources = append(sources, *u)
			}
		}
		if len(sources) != 1 || sources[0] != "https://media.example.com/a.wav" {
			t.Fatalf("plaintext source_url: %v", sources)
		}
		text := `SELECT COUNT(*) FROM inbox_jobs WHERE COALESCE(source_url,'') LIKE ? OR COALESCE(CAST(metadata AS TEXT),'') LIKE ?
			OR COALESCE(last_error,'') LIKE ? OR CAST(renditions AS TEXT) LIKE ?`
		p := "%" + secret + "%"
		if n := count(t, db, text, p, p, p, p); n != 0 {
			t.Fatalf("%d job rows hold the secret in plaintext columns", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM job_outbox_events WHERE payload LIKE ?`, p); n != 0 {
			t.Fatalf("%d outbox payloads hold the secret", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM job_outbox_events`); n < 4 {
			t.Fatalf("expected outbox events, got %d", n)
		}
		if strings.Contains(e.logs.String(), secret) {
			t.Fatal("a log line holds the secret")
		}
	})
}

// TestEnqueueRealAddressPolicy runs the API with the production address
// policy (ssrf.Policy{}.CheckURL, private destinations refused): a
// refresh_url on the cloud metadata address or a status_webhook_url on
// loopback or a private network is answered 400 with a message starting
// with the field and naming the host and why, and nothing is written; the
// same body with public URLs is accepted. How to lift the policy is an
// operator's matter: the server log says it, the answer does not.
func TestEnqueueRealAddressPolicy(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := startWith(t, db, ssrf.Policy{}.CheckURL)
		key := e.requester()
		for i, tc := range []struct {
			field, url, host, reason string
		}{
			{"refresh_url", "http://169.254.169.254/", "169.254.169.254", "link-local"},
			{"refresh_url", "http://[::ffff:169.254.169.254]/latest/meta-data", "::ffff:169.254.169.254", "link-local"},
			{"status_webhook_url", "http://127.0.0.1:1/", "127.0.0.1", "loopback"},
			{"status_webhook_url", "http://localhost:8080/hook", "localhost", "internal host name"},
			{"status_webhook_url", "http://10.0.0.1/x", "10.0.0.1", "private"},
		} {
			m := validBody()
			m[tc.field] = tc.url
			r := e.do("POST", "/transcode", key, fmt.Sprintf("ssrf-%d", i), js(m))
			if r.Code != 400 {
				t.Fatalf("%s %s: %d %s", tc.field, tc.url, r.Code, r.Raw)
			}
			errBody, _ := r.Body["error"].(map[string]any)
			msg, _ := errBody["message"].(string)
			if errBody["code"] != "invalid_request" || !strings.HasPrefix(msg, tc.field+" ") {
				t.Fatalf("%s %s: error %v does not name the field", tc.field, tc.url, errBody)
			}
			if strings.Contains(r.Raw, secret) {
				t.Fatalf("%s: error leaks the secret", tc.field)
			}
			if !strings.Contains(msg, tc.host) || !strings.Contains(msg, tc.reason) {
				t.Fatalf("%s %s: message %q does not say which host was refused and why", tc.field, tc.url, msg)
			}
			if strings.Contains(r.Raw, ssrf.EnvAllowPrivate) || strings.Contains(r.Raw, "development") {
				t.Fatalf("%s %s: the answer tells the requester the server's settings: %s", tc.field, tc.url, r.Raw)
			}
		}
		if logs := e.logs.String(); !strings.Contains(logs, ssrf.Hint) || !strings.Contains(logs, `"host":"10.0.0.1"`) {
			t.Fatalf("no log line tells the operator how the refused callback URLs could be allowed:\n%s", logs)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`) + count(t, db, `SELECT COUNT(*) FROM idempotency_keys`); n != 0 {
			t.Fatalf("refused requests wrote %d rows", n)
		}
		if r := e.do("POST", "/transcode", key, "ssrf-ok", js(validBody())); r.Code != 202 {
			t.Fatalf("public callback URLs: %d %s", r.Code, r.Raw)
		}
	})
}

// TestReplayAfterCredentialsExpired: credentials are not part of the request
// hash, so a retry under the same key is the same request even once the
// short-lived credentials it carries have expired; it answers the stored
// 202 with the first job_id, not a 400 that would tell the requester no job
// exists. A new key with those credentials is still refused.
func TestReplayAfterCredentialsExpired(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		b := validBody()
		// Room for a first enqueue slowed by a busy machine, which would be
		// refused as expired itself.
		at := time.Now().Add(5 * time.Second)
		expires := at.UTC().Format(time.RFC3339Nano)
		for _, side := range []string{"source", "output"} {
			b[side].(map[string]any)["credentials"].(map[string]any)["expires_at"] = expires
		}
		body := js(b)
		r := e.do("POST", "/transcode", key, "k-exp", body)
		if r.Code != 202 {
			t.Fatalf("enqueue: %d %s", r.Code, r.Raw)
		}
		time.Sleep(time.Until(at) + 500*time.Millisecond)
		cases := []struct {
			name     string
			idem     string
			want     int
			wantJob  bool
			wantText string
		}{
			{"same key replays", "k-exp", 202, true, ""},
			{"new key refused", "k-new", 400, false, "credentials.expires_at is in the past"},
		}
		for _, c := range cases {
			got := e.do("POST", "/transcode", key, c.idem, body)
			if got.Code != c.want || (c.wantJob && got.Body["job_id"] != r.Body["job_id"]) || !strings.Contains(got.Raw, c.wantText) {
				t.Errorf("%s: %d %s", c.name, got.Code, got.Raw)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`); n != 1 {
			t.Fatalf("%d jobs, want 1", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'k-new'`); n != 0 {
			t.Fatalf("refused request left its key reserved")
		}
	})
}

// TestUnusableOutputLocationRefused: an output.prefix with a "." or ".."
// segment, or a storage endpoint that is not http(s)://host[:port], can
// never be written or read where it says (central/storage refuses it at run
// time), so it is a 400 invalid_request at submit naming the field and why,
// with nothing stored — not an accepted job that fails later. Prefixes and
// endpoints that merely contain dots or a bare "/" path are accepted.
func TestUnusableOutputLocationRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		const dots, hostPort = `"." or ".."`, "http(s)://host[:port]"
		cases := []struct {
			side, field, value, reason string
		}{
			{"output", "prefix", "jobs/../../elsewhere/", dots},
			{"output", "prefix", "..", dots},
			{"output", "prefix", "./jobs/1", dots},
			{"output", "prefix", "jobs/1/.", dots},
			{"output", "prefix", "jobs/./1/", dots},
			{"output", "endpoint", "https://s3.example.com/base", hostPort},
			{"output", "endpoint", "https://s3.example.com/?x-id=1", hostPort},
			{"output", "endpoint", "https://s3.example.com/#f", hostPort},
			{"output", "endpoint", "https://user:" + secret + "@s3.example.com", hostPort},
			{"output", "endpoint", "s3://s3.example.com", "http"},
			{"source", "endpoint", "https://s3.example.com/base", hostPort},
			{"source", "endpoint", "https://s3.example.com?", hostPort},
			{"source", "endpoint", "https://user@s3.example.com", hostPort},
			{"source", "endpoint", "ftp://s3.example.com", "http"},
		}
		for i, tc := range cases {
			m := validBody()
			m[tc.side].(map[string]any)[tc.field] = tc.value
			r := e.do("POST", "/transcode", key, fmt.Sprintf("loc-%d", i), js(m))
			field := tc.side + "." + tc.field
			errBody, _ := r.Body["error"].(map[string]any)
			msg, _ := errBody["message"].(string)
			if r.Code != 400 || errBody["code"] != "invalid_request" || !strings.HasPrefix(msg, field+" ") || !strings.Contains(msg, tc.reason) {
				t.Errorf("%s %q: %d %s, want 400 invalid_request naming %s and %s", field, tc.value, r.Code, r.Raw, field, tc.reason)
			}
			if strings.Contains(r.Raw, secret) {
				t.Errorf("%s %q: error leaks the secret", field, tc.value)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`) + count(t, db, `SELECT COUNT(*) FROM idempotency_keys`); n != 0 {
			t.Fatalf("refused requests wrote %d rows", n)
		}
		for i, tc := range []struct{ side, field, value string }{
			{"output", "prefix", ""},
			{"output", "prefix", "jobs/1"},
			{"output", "prefix", "..jobs/v1.2/.hidden/a..b/"},
			{"output", "endpoint", "https://s3.example.com"},
			{"output", "endpoint", "https://s3.example.com:9000/"},
			{"source", "endpoint", "http://s3.example.com:7070"},
		} {
			m := validBody()
			m[tc.side].(map[string]any)[tc.field] = tc.value
			if r := e.do("POST", "/transcode", key, fmt.Sprintf("loc-ok-%d", i), js(m)); r.Code != 202 {
				t.Errorf("%s.%s %q: %d %s", tc.side, tc.field, tc.value, r.Code, r.Raw)
			}
		}
	})
}

// TestAmbiguousNamesRefused: a body whose meaning depends on the JSON
// parser reading it is refused, nothing stored. encoding/json lets the last
// of two equal names win (merging two objects under one field) and matches
// field names without regard to case, while other parsers keep the first
// or refuse; Postgres jsonb keeps one copy of a repeated metadata name and
// SQLite both, so status and webhooks would differ by engine. Names that
// merely recur in different objects, and metadata names in any case, are
// accepted.
func TestAmbiguousNamesRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		body := js(validBody())
		meta := func(m string) string {
			return strings.Replace(js(withMetadata(validBody(), map[string]any{"t": "MARK"})), `{"t":"MARK"}`, m, 1)
		}
		refused := []struct{ name, body, field string }{
			{"repeated top-level name", strings.Replace(body, `"renditions":`, `"renditions":[{"name":"x","codec":"mp3"}],"renditions":`, 1), "body"},
			{"repeated credential", strings.Replace(body, `"secret_access_key":"`+secret+`"`, `"secret_access_key":"`+secret+`","secret_access_key":"`+secret+`"`, 1), "body"},
			{"repeated object merged", strings.Replace(body, `"output":`, `"output":{"bucket":"elsewhere"},"output":`, 1), "body"},
			{"repeated metadata name", meta(`{"t":1,"t":2}`), "body"},
			{"repeated nested metadata name", meta(`{"a":{"x":1,"x":1}}`), "body"},
			{"field in capitals", strings.Replace(body, `"renditions":`, `"RENDITIONS":`, 1), "RENDITIONS"},
			{"field with a folding letter", strings.Replace(body, `"source":`, `"ſource":`, 1), "ſource"},
			{"nested field in capitals", strings.Replace(body, `"prefix":`, `"Prefix":`, 1), "Prefix"},
		}
		for i, tc := range refused {
			r := e.do("POST", "/transcode", key, fmt.Sprintf("amb-%d", i), tc.body)
			errBody, _ := r.Body["error"].(map[string]any)
			msg, _ := errBody["message"].(string)
			if r.Code != 400 || !strings.HasPrefix(msg, tc.field+" ") {
				t.Errorf("%s: %d %s, want 400 naming %s", tc.name, r.Code, r.Raw, tc.field)
			}
			if strings.Contains(r.Raw, secret) {
				t.Errorf("%s: error leaks the secret", tc.name)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`) + count(t, db, `SELECT COUNT(*) FROM idempotency_keys`); n != 0 {
			t.Fatalf("refused requests wrote %d rows", n)
		}
		for i, m := range []string{`{"a":{"x":1},"b":{"x":1}}`, `{"Track":1,"track":2}`, `{"l":[{"x":1},{"x":2}]}`} {
			if r := e.do("POST", "/transcode", key, fmt.Sprintf("amb-ok-%d", i), meta(m)); r.Code != 202 {
				t.Errorf("metadata %s: %d %s", m, r.Code, r.Raw)
			}
		}
	})
}
