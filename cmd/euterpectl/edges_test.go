package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/ingest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

var listeningRe = regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)

// startCentral runs euterpe-central's serve (api and sync roles) on a
// database of engine e and returns its URL and dependencies.
func startCentral(t *testing.T, e string) (string, *serve.Deps, *testsvc.LogBuffer) {
	t.Helper()
	env := map[string]string{
		"EUTERPE_DATABASE_URL":  sqltest.URL(t, sqltest.Engines[map[string]int{"postgres": 0, "sqlite": 1}[e]]),
		"EUTERPE_KEYRING":       "k1:" + credentials.NewKey(),
		"EUTERPE_STATE_DIR":     t.TempDir(),
		"EUTERPE_CENTRAL_ADDR":  "127.0.0.1:0",
		"EUTERPE_CENTRAL_ROLES": "api,sync",
	}
	getenv := func(k string) string { return env[k] }
	app := serve.NewApp()
	app.AddMigrations(ingest.Migrations())
	app.Register(ingest.Definition())
	var s serve.Settings
	cfg := daemon.NewConfig("euterpe-central", getenv)
	app.Bind(cfg, &s)
	require.NoError(t, cfg.Parse(nil))
	logs := &testsvc.LogBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	d, closeFn, err := app.Open(ctx, s, log, getenv)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, s, d) }()
	t.Cleanup(func() {
		cancel()
		<-done
		closeFn()
	})
	var addr string
	require.Eventually(t, func() bool {
		m := listeningRe.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 20*time.Second, 20*time.Millisecond)
	return "http://" + addr, d, logs
}

func runCtlEnv(env map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}, args)
	return code, out.String(), errb.String()
}

// Every edges command against a real central: list, get, jobs (with a
// status filter and pages), events with gaps (and --follow ending when the
// job ends), and the fleet tail; the token comes from the environment or
// --token and is never printed.
func TestEdgesCommands(t *testing.T) {
	for _, engine := range []string{"postgres", "sqlite"} {
		t.Run(engine, func(t *testing.T) {
			url, d, logs := startCentral(t, engine)
			ctx := context.Background()
			op, err := d.Operators.Create(ctx, "ctl")
			require.NoError(t, err)
			reg, err := ingest.NewRegistry(d.DB, d.Keys).Register(ctx, "jetson-demo")
			require.NoError(t, err)
			send := func(b wire.Batch) {
				raw, err := wire.Encode(b)
				require.NoError(t, err)
				body := wire.Compress(raw)
				req, _ := http.NewRequest(http.MethodPost, url+wire.BatchPath, bytes.NewReader(body))
				req.Header.Set("Content-Encoding", "gzip")
				require.NoError(t, wire.Sign(req, time.Now(), b, body, []byte(reg.SyncSecret)))
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				res.Body.Close()
				require.Equal(t, 200, res.StatusCode)
			}
			ev := func(job, typ string, ms int64) wire.Event {
				return wire.NewEvent(reg.EdgeID, job, fmt.Sprintf("%d-0", ms), typ, "s", ms, json.RawMessage(`{}`))
			}
			var evs []wire.Event
			for j := range 250 {
				job := fmt.Sprintf("job-%03d", j)
				evs = append(evs, ev(job, "queued", 1700000000000+int64(j)*10), ev(job, "running", 1700000000001+int64(j)*10), ev(job, "done", 1700000000002+int64(j)*10))
			}
			send(wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: evs[:300]})
			send(wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: evs[300:]})
			send(wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: []wire.Event{ev("live", "queued", 1800000000000), ev("live", "running", 1800000000001)},
				Dropped: []wire.Gap{{GapID: wire.GapID(reg.EdgeID, "live", "1800000000001-5"), JobID: "live", Type: "delta", Count: 4,
					FirstEntryID: "1800000000001-5", LastEntryID: "1800000000001-9", FirstTS: 1800000000001, LastTS: 1800000000001}}})

			env := map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_OPERATOR_TOKEN": op.Token}
			code, out, errOut := runCtlEnv(env, "edges", "list")
			require.Equal(t, 0, code, errOut)
			assert.Contains(t, out, `"name":"jetson-demo"`)
			code, out, _ = runCtlEnv(env, "edges", "get", reg.EdgeID)
			require.Equal(t, 0, code)
			assert.Contains(t, out, `"events_total":752`)

			code, out, _ = runCtlEnv(env, "edges", "jobs", reg.EdgeID)
			require.Equal(t, 0, code)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 251) // more than one page of 200
			assert.Contains(t, lines[0], `"job_id":"live"`)
			code, out, _ = runCtlEnv(env, "edges", "jobs", reg.EdgeID, "--status", "running")
			require.Equal(t, 0, code)
			assert.Equal(t, 1, strings.Count(out, "\n"))
			code, out, _ = runCtlEnv(env, "edges", "jobs", reg.EdgeID, "--limit", "5")
			require.Equal(t, 0, code)
			assert.Equal(t, 5, strings.Count(out, "\n"))

			code, out, _ = runCtlEnv(env, "edges", "events", reg.EdgeID, "job-007")
			require.Equal(t, 0, code)
			assert.Equal(t, 3, strings.Count(out, "\n"))
			assert.Contains(t, out, `"type":"done"`)

			// --follow ends once the job's terminal event arrives.
			followed := make(chan string, 1)
			go func() {
				_, out, _ := runCtlEnv(env, "edges", "events", reg.EdgeID, "live", "--follow", "--interval", "100ms")
				followed <- out
			}()
			time.Sleep(300 * time.Millisecond)
			send(wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: []wire.Event{ev("live", "done", 1800000000002)}})
			select {
			case out = <-followed:
			case <-time.After(15 * time.Second):
				t.Fatal("--follow did not end with the job")
			}
			assert.Contains(t, out, `{"gap":{"gap_id"`)
			assert.Contains(t, out, `"type":"done"`)
			assert.Equal(t, 4, strings.Count(out, "\n"), out)

			code, out, _ = runCtlEnv(env, "edges", "tail", "--last-event-id", "0", "--count", "5")
			require.Equal(t, 0, code)
			assert.Equal(t, 5, strings.Count(out, "\n"))
			assert.Contains(t, out, `"seq":`)

			// --token instead of the environment; a wrong token fails.
			code, _, errOut = runCtlEnv(map[string]string{"EUTERPE_CENTRAL_URL": url}, "edges", "list", "--token", op.Token)
			assert.Equal(t, 0, code, errOut)
			code, out, errOut = runCtlEnv(map[string]string{"EUTERPE_CENTRAL_URL": url}, "edges", "list", "--token", op.Token+"x")
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "unauthorized")
			assert.NotContains(t, errOut+out, op.Token)
			code, _, errOut = runCtlEnv(env, "edges", "get", "nope")
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "not_found")
			assert.NotContains(t, errOut, op.Token)
			code, _, _ = runCtlEnv(env, "edges", "events", reg.EdgeID)
			assert.Equal(t, 2, code)
			assert.NotContains(t, logs.String(), op.Token)
			assert.NotContains(t, logs.String(), reg.SyncSecret)

			// The composition serves the role's metrics and OpenAPI fragment.
			for path, want := range map[string]string{
				"/metrics":      `euterpe_sync_events_total{result="accepted"} 753`,
				"/openapi.json": `"/v1/edges/{id}/jobs/{job_id}/events"`,
			} {
				res, err := http.Get(url + path)
				require.NoError(t, err)
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				assert.Contains(t, string(b), want, path)
			}
		})
	}
}

// edges tail resumes a stream that central ended or that broke, but
// waits before each reconnection, longer each time nothing came through
// and short again once events flow; it says why on stderr, and Ctrl-C
// ends it at once, pause or not.
func TestEdgesTailBacksOff(t *testing.T) {
	url, d, _ := startCentral(t, "sqlite")
	ctx := context.Background()
	op, err := d.Operators.Create(ctx, "ctl")
	require.NoError(t, err)
	env := map[string]string{"EUTERPE_OPERATOR_TOKEN": op.Token}

	for _, tc := range []struct {
		name  string
		clean bool
		why   string
	}{{"stream ended by central", true, "ended"}, {"stream broken", false, "unexpected EOF"}} {
		t.Run(tc.name, func(t *testing.T) {
			// Only the opening frame of each stream, then the end.
			proxy, conns := cutProxy(t, strings.TrimPrefix(url, "http://"), 1, tc.clean)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				code      int
				out, errs string
				at        time.Time
			}
			done := make(chan result, 1)
			go func() {
				code, out, errOut := runCtlCtx(ctx, env, "edges", "tail", "--server", proxy)
				done <- result{code, out, errOut, time.Now()}
			}()
			time.Sleep(2 * time.Second)
			canceled := time.Now()
			cancel()
			select {
			case r := <-done:
				assert.Equal(t, 0, r.code, "interrupting a tail without --count is how it ends: %s", r.errs)
				assert.Less(t, r.at.Sub(canceled), time.Second, "the pause outlived the interrupt") // about 1.5 s of it is left
				assert.LessOrEqual(t, conns.Load(), int64(4), "reconnections in 2s")
				assert.Contains(t, r.errs, tc.why)
				assert.Contains(t, r.errs, "reconnecting in")
				assert.NotContains(t, r.errs, op.Token)
				assert.Empty(t, r.out)
			case <-time.After(10 * time.Second):
				t.Fatal("edges tail did not stop")
			}
		})
	}

	t.Run("events flowing keep the pause short", func(t *testing.T) {
		reg := postEvents(t, url, ingest.NewRegistry(d.DB, d.Keys), "jetson-tail", 6)

		// The opening frame and one event per stream.
		proxy, conns := cutProxy(t, strings.TrimPrefix(url, "http://"), 2, false)
		start := time.Now()
		code, out, errOut := runCtlEnv(env, "edges", "tail", "--server", proxy, "--edge", reg.EdgeID, "--last-event-id", "0", "--count", "6")
		require.Equal(t, 0, code, errOut)
		assert.Equal(t, 6, strings.Count(out, "\n"), out)
		assert.Equal(t, int64(6), conns.Load())
		assert.Less(t, time.Since(start), 8*time.Second, "the pause grew although every stream brought an event")
		for i := range 6 {
			assert.Equal(t, 1, strings.Count(out, fmt.Sprintf(`"entry_id":"%d-0"`, 1700000000000+i)), out)
		}
	})

	// A seq typed by the user may come from the jobs API, not from a tail:
	// it goes as ?last_event_id= (resumed at least once, never past a row
	// of a transaction still open when it was read); the tail's own
	// reconnections send the last printed id as Last-Event-ID (exact).
	t.Run("the user's seq goes as the parameter, reconnections as the header", func(t *testing.T) {
		type seen struct{ query, header string }
		var mu sync.Mutex
		var reqs []seen
		target, err := neturl.Parse(url)
		require.NoError(t, err)
		rp := httputil.NewSingleHostReverseProxy(target)
		rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			reqs = append(reqs, seen{r.URL.Query().Get("last_event_id"), r.Header.Get("Last-Event-ID")})
			mu.Unlock()
			rp.ServeHTTP(w, r)
		}))
		defer rec.Close()
		reg := postEvents(t, url, ingest.NewRegistry(d.DB, d.Keys), "jetson-resume", 2)
		proxy, _ := cutProxy(t, strings.TrimPrefix(rec.URL, "http://"), 2, false)
		code, out, errOut := runCtlEnv(env, "edges", "tail", "--server", proxy, "--edge", reg.EdgeID, "--last-event-id", "0", "--count", "2")
		require.Equal(t, 0, code, errOut)
		require.Equal(t, 2, strings.Count(out, "\n"), out)
		mu.Lock()
		defer mu.Unlock()
		require.GreaterOrEqual(t, len(reqs), 2, "the cut proxy forces a reconnection")
		assert.Equal(t, seen{query: "0"}, reqs[0])
		assert.Empty(t, reqs[1].query)
		assert.NotEmpty(t, reqs[1].header)
	})

	t.Run("interrupted before --count", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		code, _, errOut := runCtlCtx(ctx, env, "edges", "tail", "--server", url, "--count", "1")
		assert.Equal(t, 1, code, errOut)
	})
}

// Central gives every event an entry_id (the cursor of the next page and
// of --follow), but edges events does not take one on trust: an event
// without a usable entry_id is printed once like any other, and when the
// command would have to ask for what comes after it, it says so on one
// line and exits 1 rather than asking from the start again, which printed
// the same events over and over. Gaps without a gap_id are each printed
// once too.
func TestEdgesEventsWithoutEntryID(t *testing.T) {
	const jobID = "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d"
	page := func(status string, events ...string) string {
		return `{"job":{"status":"` + status + `"},"events":[` + strings.Join(events, ",") +
			`],"gaps":[{"type":"delta","count":2},{"type":"delta","count":3}]}`
	}
	full := make([]string, edgeEventsPage)
	for i := range full {
		full[i] = fmt.Sprintf(`{"seq":%d,"type":"delta"}`, i+1)
	}
	for _, tc := range []struct {
		name   string
		body   string
		follow bool
		code   int
		lines  int
	}{
		{"a full page", page("running", full...), false, 1, edgeEventsPage},
		{"following a running job", page("running", `{"entry_id":"1-0","type":"queued"}`, `{"type":"running"}`), true, 1, 2},
		{"an entry_id that is not one", page("running", `{"entry_id":"1-0&limit=1","type":"queued"}`), true, 1, 1},
		{"not an object", page("running", `{"entry_id":"1-0","type":"queued"}`, `null`), true, 1, 2},
		{"a job that ended", page("done", `{"type":"running"}`, `{"type":"done"}`), true, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// Enough answers for a command that starts over to
				// print something twice, not so many that it fills
				// memory before the test ends it.
				if asked.Add(1) > 3 {
					http.Error(w, `{"error":{"code":"enough","message":"asked too often"}}`, http.StatusServiceUnavailable)
					return
				}
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			env := map[string]string{"EUTERPE_CENTRAL_URL": srv.URL, "EUTERPE_OPERATOR_TOKEN": "eop_test"}
			args := []string{"edges", "events", "edge-1", jobID, "--interval", "10ms"}
			if tc.follow {
				args = append(args, "--follow")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code, out, errOut := runCtlCtx(ctx, env, args...)
			require.Equal(t, tc.code, code, errOut)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, tc.lines+2, "each event and gap printed once")
			require.Equal(t, 2, strings.Count(out, `{"gap":`), out)
			if tc.code == 1 {
				require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
				require.Contains(t, errOut, "entry_id")
				require.Equal(t, int64(1), asked.Load())
			} else {
				require.Empty(t, errOut)
			}
		})
	}
}

// A follow whose output cannot be written (a full disk) stops and exits 1
// naming the failed write: edges tail without --count, and edges events
// --follow on a job still running, would otherwise run for ever printing
// into nothing.
func TestFollowStopsWhenOutputCannotBeWritten(t *testing.T) {
	url, d, _ := startCentral(t, "sqlite")
	ctx := context.Background()
	op, err := d.Operators.Create(ctx, "ctl")
	require.NoError(t, err)
	reg := postEvents(t, url, ingest.NewRegistry(d.DB, d.Keys), "jetson-full-disk", 1)

	env := map[string]string{"EUTERPE_OPERATOR_TOKEN": op.Token}
	for _, args := range [][]string{
		{"edges", "tail", "--server", url, "--last-event-id", "0"},
		{"edges", "events", "--server", url, "--follow", "--interval", "50ms", reg.EdgeID, "job-1"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var errb bytes.Buffer
		code := dispatch(ctx, Env{Stdin: strings.NewReader(""), Stdout: failingWriter{}, Stderr: &errb,
			Getenv: func(k string) string { return env[k] }}, args)
		stoppedByItself := ctx.Err() == nil
		cancel()
		assert.True(t, stoppedByItself, "%v ran on with nowhere to write", args[:2])
		assert.Equal(t, 1, code, "%v", args[:2])
		assert.Contains(t, errb.String(), "no space left on device", "%v", args[:2])
	}
}

// postEvents registers an edge and sends central one signed batch of n
// progress events of one job, as the edge's shipper would.
func postEvents(t *testing.T, url string, r *ingest.Registry, edge string, n int) ingest.Registered {
	t.Helper()
	reg, err := r.Register(context.Background(), edge)
	require.NoError(t, err)
	var evs []wire.Event
	for i := range n {
		ms := int64(1700000000000 + i)
		evs = append(evs, wire.NewEvent(reg.EdgeID, "job-1", fmt.Sprintf("%d-0", ms), "progress", "s", ms, json.RawMessage(`{}`)))
	}
	b := wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: evs}
	raw, err := wire.Encode(b)
	require.NoError(t, err)
	body := wire.Compress(raw)
	req, _ := http.NewRequest(http.MethodPost, url+wire.BatchPath, bytes.NewReader(body))
	req.Header.Set("Content-Encoding", "gzip")
	require.NoError(t, wire.Sign(req, time.Now(), b, body, []byte(reg.SyncSecret)))
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 200, res.StatusCode)
	return reg
}
