package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// hostile is what a payload or a file name may hold; every page must show
// it as text.
const hostile = `<script>alert(1)</script>`

// llmSecret is the LLM backend's API key: no page may show it.
const llmSecret = "sk-console-test-secret"

// gatedLLM is an OpenAI-compatible stand-in that streams tokens as the
// test releases them, so the test sees a job's events arrive while it runs.
type gatedLLM struct {
	release chan int      // how many tokens to send next; finish (-1) ends the stream
	stop    chan struct{} // closed when the test ends: every stream returns
}

const finish = -1

func (g *gatedLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	tok := 0
	send := func() {
		tok++
		b, _ := json.Marshal(map[string]any{"model": "m1", "choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": fmt.Sprintf("tok%d ", tok)}, "finish_reason": nil}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	for {
		select {
		case n := <-g.release:
			if n == finish {
				fmt.Fprint(w, `data: {"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
				fl.Flush()
				return
			}
			for i := 0; i < n; i++ {
				send()
				time.Sleep(150 * time.Millisecond) // one delta event each (the coalescing window is 100 ms)
			}
		case <-r.Context().Done():
			return
		case <-g.stop:
			return
		}
	}
}

// consoleStack is a real serve stack (gateway, workers, library, console)
// on a real Redis and a SQLite library with duplicate images.
type consoleStack struct {
	base, state, lib string
	rdb              *redis.Client
	llm              *gatedLLM
}

func startConsoleStack(t *testing.T, extra map[string]string) *consoleStack {
	t.Helper()
	ffmpeg, err := exec.LookPath("ffmpeg")
	if err != nil {
		testsvc.Unavailable(t, "ffmpeg", err)
	}
	rdb, opt := testsvc.Redis(t)
	s := &consoleStack{state: t.TempDir(), lib: t.TempDir(), rdb: rdb, llm: &gatedLLM{release: make(chan int), stop: make(chan struct{})}}
	// Three copies of one image (one named like markup), and one other.
	img := filepath.Join(s.lib, "photo.png")
	out, err := exec.Command(ffmpeg, "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=160x120:duration=1", "-frames:v", "1", img).CombinedOutput()
	require.NoError(t, err, "%s", out)
	data, err := os.ReadFile(img)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(s.lib, "backup"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(s.lib, "backup", "photo.png"), data, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(s.lib, "<script>alert(1)<script>.png"), data, 0o644))
	out, err = exec.Command(ffmpeg, "-loglevel", "error", "-f", "lavfi", "-i", "color=c=red:size=64x64:duration=1", "-frames:v", "1", filepath.Join(s.lib, "red.png")).CombinedOutput()
	require.NoError(t, err, "%s", out)

	llm := httptest.NewServer(s.llm)
	t.Cleanup(llm.Close)
	t.Cleanup(func() { close(s.llm.stop) }) // before Close, which waits for the streams
	env := map[string]string{
		"EUTERPE_REDIS_URL":                fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB),
		"EUTERPE_STATE_DIR":                s.state,
		"EUTERPE_LIBRARY_ROOTS":            s.lib,
		"EUTERPE_LLM_BASE_URL":             llm.URL,
		"EUTERPE_LLM_API_KEY":              llmSecret,
		"EUTERPE_TASK_BACKENDS":            "tool=exec:/bin/cat,chat=llm",
		"EUTERPE_CONSOLE_HISTORY_INTERVAL": "1s",
		"EUTERPE_LIBRARY_POLICY_INTERVAL":  "200ms",
		"EUTERPE_LIBRARY_WATCH":            "false",
		"EUTERPE_SHUTDOWN_GRACE":           "3s",
		"EUTERPE_WORKER_DRAIN":             "1s",
	}
	for k, v := range extra {
		env[k] = v
	}
	s.base = serveInProcess(t, env)
	return s
}

func httpDo(t *testing.T, method, url, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// waitGroups scans the library and waits for the duplicate group of the
// three copies.
func (s *consoleStack) waitGroups(t *testing.T) {
	t.Helper()
	code, body := httpDo(t, "POST", s.base+"/api/v1/scans", "", nil)
	require.Equal(t, http.StatusAccepted, code, body)
	require.Eventually(t, func() bool {
		_, body := httpDo(t, "GET", s.base+"/api/v1/duplicates/groups", "", nil)
		return strings.Contains(body, `"file_count":3`)
	}, 60*time.Second, 200*time.Millisecond, "the duplicate group of three copies")
}

// addScanWithUnreadable records, in the stack's library database, a later
// scan session like the last one that could not read n paths (a test run
// as root reads every directory).
func (s *consoleStack) addScanWithUnreadable(t *testing.T, n int) {
	t.Helper()
	var path string
	require.NoError(t, filepath.WalkDir(s.state, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "library.db" {
			path = p
		}
		return err
	}))
	require.NotEmpty(t, path, "library.db under the state directory")
	db, err := sql.Open("sqlite", sqldb.SQLiteDSN(path))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`INSERT INTO scan_sessions(job_id, roots, status, files_seen, paths_unreadable, started_at, finished_at)
SELECT job_id, roots, status, files_seen, ?, started_at, finished_at FROM scan_sessions WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1`, n)
	require.NoError(t, err)
}

// TestConsolePages checks the pages over HTTP: they render, escape, refuse
// bad input, show no secret, and the console can be turned off.
func TestConsolePages(t *testing.T) {
	s := startConsoleStack(t, nil)
	code, body := httpDo(t, "POST", s.base+"/v1/jobs", `{"task":"tool","payload":{"x":"`+strings.ReplaceAll(hostile, `"`, `\"`)+`"}}`, nil)
	require.Equal(t, http.StatusAccepted, code, body)
	var created struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	require.Eventually(t, func() bool {
		_, b := httpDo(t, "GET", s.base+"/v1/jobs/"+created.JobID, "", nil)
		return strings.Contains(b, `"status":"done"`)
	}, 30*time.Second, 50*time.Millisecond)
	_, err := s.rdb.XAdd(context.Background(), deadLetter(hostile)).Result()
	require.NoError(t, err)
	s.waitGroups(t)
	s.addScanWithUnreadable(t, 7)

	for _, tc := range []struct {
		path string
		code int
		want []string
	}{
		{"/ui/", 200, []string{created.JobID, "Submit a job", `data-series="backlog"`}},
		{"/ui/?status=done", 200, []string{created.JobID}},
		{"/ui/?status=queued", 200, []string{"No jobs with status queued"}},
		{"/ui/?status=%3Cscript%3E", 400, []string{"no job status &lt;script&gt;"}},
		{"/ui/jobs/" + created.JobID, 200, []string{"&lt;script&gt;alert(1)&lt;/script&gt;", `data-job-id="` + created.JobID + `"`}},
		{"/ui/jobs/3fa9415e-ab54-4a6d-8d3e-fd55b4fdf241", 404, []string{"unknown, or expired"}},
		{"/ui/jobs/%3Cscript%3E", 404, []string{"no job &lt;script&gt;"}},
		{"/ui/queue", 200, []string{"&lt;script&gt;alert(1)&lt;/script&gt;", "max_deliveries_exceeded", "ready"}},
		{"/ui/library", 200, []string{"&lt;script&gt;alert(1)&lt;script&gt;.png", "3 copies", "trash", "<b>7</b><span>unreadable</span>"}},
		{"/ui/history.json", 200, []string{`"backlog"`, `"run_seconds"`}},
		{"/ui/assets/console.js", 200, []string{"Last-Event-ID"}},
		{"/ui/app/edge.js", 200, []string{"textContent"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, body := httpDo(t, "GET", s.base+tc.path, "", nil)
			assert.Equal(t, tc.code, code)
			for _, w := range tc.want {
				assert.Contains(t, body, w)
			}
			assert.NotContains(t, body, hostile, "markup from data reaches the page unescaped")
			assert.NotContains(t, body, "<script>alert", "markup from data reaches the page unescaped")
			assert.NotContains(t, body, llmSecret)
		})
	}
	code, body = httpDo(t, "GET", s.base+"/metrics", "", nil)
	require.Equal(t, 200, code)
	for _, m := range []string{"euterpe_edge_backlog ", "euterpe_edge_pending ", "euterpe_edge_dead_letters 1", "euterpe_edge_consumers 1",
		"euterpe_edge_library_wal_bytes ", "euterpe_edge_library_duplicate_groups 1", `euterpe_edge_jobs_finished_total{status="done",task="tool"} 1`,
		`euterpe_edge_job_run_seconds_count{task="tool"} 1`} {
		assert.Contains(t, body, m)
	}
	checkDashboard(t, body)
}

// checkDashboard: every series deploy/grafana/euterpe-edge.json queries is
// one the edge exports (the sync ones only with sync on, so they are
// looked up in the shipper's source instead).
func checkDashboard(t *testing.T, metrics string) {
	t.Helper()
	dash, err := os.ReadFile("../../deploy/grafana/euterpe-edge.json")
	require.NoError(t, err)
	var parsed map[string]any
	require.NoError(t, json.Unmarshal(dash, &parsed), "valid JSON")
	ship, err := os.ReadFile("../../sync/ship/metrics.go")
	require.NoError(t, err)
	names := regexp.MustCompile(`\b(euterpe_[a-z_]+|process_[a-z_]+|go_[a-z_]+)\b`).FindAllString(string(dash), -1)
	require.NotEmpty(t, names)
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")
		if strings.HasPrefix(base, "euterpe_sync_") {
			assert.Contains(t, string(ship), `"`+base+`"`, "dashboard series %s", n)
			continue
		}
		assert.Contains(t, metrics, "\n"+n, "dashboard series %s is not on /metrics", n)
	}
}

// TestCrossOriginPostsRefused: a browser on another site cannot make the
// operator's browser submit, cancel or delete; non-browser clients are
// unaffected.
func TestCrossOriginPostsRefused(t *testing.T) {
	s := startConsoleStack(t, map[string]string{"EUTERPE_TRUSTED_ORIGINS": "https://console.example"})
	job := `{"task":"tool","payload":{}}`
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		code    int
	}{
		{"cross-site submit", "/v1/jobs", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}, 403},
		{"foreign origin submit", "/v1/jobs", map[string]string{"Origin": "https://evil.example"}, 403},
		{"cross-site delete", "/api/v1/duplicates/groups/blake3:00/delete", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"cross-site scan", "/api/v1/scans", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"same origin", "/v1/jobs", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": s.base}, 202},
		{"trusted proxy origin", "/v1/jobs", map[string]string{"Origin": "https://console.example", "Sec-Fetch-Site": "cross-site"}, 202},
		{"no browser (curl, euterpectl)", "/v1/jobs", nil, 202},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := httpDo(t, "POST", s.base+tc.path, job, tc.headers)
			assert.Equal(t, tc.code, code, body)
			if tc.code == 403 {
				assert.Contains(t, body, "cross_origin")
			}
		})
	}
	var stderr strings.Builder
	code := run(context.Background(), []string{"serve"}, io.Discard, &stderr, envMap(map[string]string{"EUTERPE_TRUSTED_ORIGINS": "not a url"}))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), "EUTERPE_TRUSTED_ORIGINS")
}

func TestConsoleOff(t *testing.T) {
	_, opt := testsvc.Redis(t)
	base := serveInProcess(t, map[string]string{"EUTERPE_REDIS_URL": fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB), "EUTERPE_CONSOLE": "false"})
	code, _ := httpDo(t, "GET", base+"/ui/", "", nil)
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = httpDo(t, "GET", base+"/healthz", "", nil)
	assert.Equal(t, http.StatusOK, code)
}

// trashed lists the base names of the files under the trash directory.
func trashed(t *testing.T, state string) []string {
	t.Helper()
	var names []string
	_ = filepath.WalkDir(filepath.Join(state, "trash"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasPrefix(d.Name(), ".") {
			names = append(names, d.Name())
		}
		return nil
	})
	return names
}

// deadLetter is a jobs:dead entry as the workers write it, with payload.
func deadLetter(payload string) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: jobs.DeadStream, Values: []any{
		"job_id", "00000000-0000-4000-8000-000000000000", "task", "tool", "payload", `{"x":"` + payload + `"}`,
		"msg_id", "1-0", "deliveries", "6", "reason", "max_deliveries_exceeded", "consumer", "w1", "ts", fmt.Sprint(time.Now().UnixMilli()),
	}}
}
