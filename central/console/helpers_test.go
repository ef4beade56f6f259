package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/console"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/pipelinerole"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/central/serve/servetest"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/ingest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// newApp composes euterpe-central as the program does (cmd/euterpe-central
// register), without the transcode runner, which needs ffmpeg and storage
// the console does not.
func newApp() *serve.App {
	app := serve.NewApp()
	app.AddMigrations(outbox.Migrations())
	app.AddMigrations(ingest.Migrations())
	app.Register(outbox.Definition())
	app.Register(ingest.Definition())
	app.AddMigrations(pipeline.Migrations())
	app.Register(pipelinerole.Definition())
	app.Register(console.Definition())
	return app
}

// central is a running euterpe-central (the serve composition, in this
// process) on a fresh database, with an operator and a requester.
type central struct {
	base  string
	deps  *serve.Deps
	logs  *testsvc.LogBuffer
	op    operators.Created
	req   requesters.Created
	state string
}

func startCentral(t *testing.T, engine sqldb.Engine, extra map[string]string) *central {
	t.Helper()
	state := t.TempDir()
	env := map[string]string{
		"EUTERPE_DATABASE_URL":          sqltest.URL(t, engine),
		"EUTERPE_STATE_DIR":             state,
		"EUTERPE_KEYRING":               "k1:" + credentials.NewKey(),
		"EUTERPE_CENTRAL_ADDR":          "127.0.0.1:0",
		"EUTERPE_WEBHOOK_ALLOW_PRIVATE": "true",
		"EUTERPE_OUTBOX_POLL_MIN":       "50ms",
		"EUTERPE_OUTBOX_POLL_MAX":       "100ms",
		"EUTERPE_PIPELINE_POLL":         "100ms",
		"EUTERPE_LOG_LEVEL":             "debug",
	}
	for k, v := range extra {
		env[k] = v
	}
	st := servetest.Start(t, newApp(), env, nil)
	c := &central{base: st.Base, deps: st.Deps, logs: st.Logs, state: state}
	ctx := context.Background()
	var err error
	if c.op, err = c.deps.Operators.Create(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if c.req, err = c.deps.Requesters.Create(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond until it holds, failing the test after 30 s.
func (c *central) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out; log:\n%s", what, c.logs.String())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// enqueue adds a transcode job of the requester through the inbox store.
func (c *central) enqueue(t *testing.T, webhook string, metadata string) string {
	t.Helper()
	id := inbox.NewJobID()
	err := c.deps.Inbox.Enqueue(context.Background(), inbox.NewJob{
		ID: id, RequesterID: c.req.RequesterID, Source: inbox.Source{Bucket: "in", Key: "a.wav"},
		Output: inbox.Output{Bucket: "out", Prefix: "jobs/"}, Renditions: []inbox.Rendition{{Name: "o", Codec: "opus"}},
		StatusWebhookURL: webhook, Metadata: json.RawMessage(metadata),
		Credentials: credentials.Storage{Source: &credentials.S3{AccessKeyID: "AKIASOURCE", SecretAccessKey: "source-secret-do-not-show"},
			Output: credentials.S3{AccessKeyID: "AKIAOUTPUT", SecretAccessKey: "output-secret-do-not-show"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// advance claims the oldest queued job and moves it to fetching, which
// writes a webhook event; it returns the job id.
func (c *central) advance(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	jobs, err := c.deps.Inbox.Claim(ctx, "test-worker", 1, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %d", err, len(jobs))
	}
	if err := c.deps.Inbox.Advance(ctx, jobs[0], schema.StatusFetching); err != nil {
		t.Fatal(err)
	}
	return jobs[0].ID
}

// edge registers an edge named name and stores events of one job and a
// heartbeat for it.
func (c *central) edge(t *testing.T, name, job string) string {
	t.Helper()
	ctx := context.Background()
	reg, err := ingest.NewRegistry(c.deps.DB, c.deps.Keys).Register(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c.edgeEvents(t, reg.EdgeID, job, time.Now().UnixMilli(), "queued", "running")
	st := wire.Status{EdgeID: reg.EdgeID, SentAt: time.Now(), Version: "1.2.3<script>v</script>", Backlog: 7,
		Spool: wire.SpoolStatus{Events: 3, OldestTS: time.Now().Add(-time.Minute).UnixMilli()}}
	raw, _ := json.Marshal(st)
	if err := ingest.NewStore(c.deps.DB).Heartbeat(ctx, st, raw); err != nil {
		t.Fatal(err)
	}
	return reg.EdgeID
}

func (c *central) edgeEvents(t *testing.T, edge, job string, ms int64, types ...string) {
	t.Helper()
	b := wire.Batch{EdgeID: edge, SentAt: time.Now()}
	for i, typ := range types {
		e := wire.NewEvent(edge, job, fmt.Sprintf("%d-0", ms+int64(i)), typ, "step."+typ, ms+int64(i),
			json.RawMessage(`{"note":"<script>window.pwned=1</script>"}`))
		e.Task = "chat"
		b.Events = append(b.Events, e)
	}
	if _, err := ingest.NewStore(c.deps.DB).Ingest(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// client is a browser-like HTTP client: a cookie jar, no redirects
// followed, and the Origin header a same-origin form post carries.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func (c *central) client(t *testing.T) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: c.base, http: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (cl *client) get(path string) (*http.Response, string) {
	cl.t.Helper()
	res, err := cl.http.Get(cl.base + path)
	if err != nil {
		cl.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func (cl *client) post(path string, form url.Values) (*http.Response, string) {
	cl.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, cl.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", cl.base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := cl.http.Do(req)
	if err != nil {
		cl.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the form token of a page.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in page:\n%s", page)
	}
	return m[1]
}

// signIn signs cl in with token and returns the response of the post.
func (cl *client) signIn(token string) (*http.Response, string) {
	cl.t.Helper()
	_, page := cl.get("/ui/signin")
	return cl.post("/ui/signin", url.Values{"csrf": {csrf(cl.t, page)}, "token": {token}, "next": {"/ui/"}})
}
