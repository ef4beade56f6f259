package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// runEdge runs `serve` with env (debug logging, a free address) until
// /ready has answered once, or until serve stops by itself; it returns
// the exit status (-1: stopped by the test), the log and every answer.
func runEdge(t *testing.T, args []string, env map[string]string) (code int, logs string, answers []string) {
	t.Helper()
	addr := freeAddr(t)
	full := map[string]string{"EUTERPE_EDGE_ADDR": addr, "EUTERPE_STATE_DIR": t.TempDir(), "EUTERPE_LOG_LEVEL": "debug",
		"EUTERPE_SHUTDOWN_GRACE": "2s", "EUTERPE_WORKER_DRAIN": "1s"}
	for k, v := range env {
		full[k] = v
	}
	var stderr testsvc.LogBuffer
	var stdout bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &stdout, &stderr, envMap(full)) }()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case code := <-done:
			return code, stdout.String() + stderr.String(), nil
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("/ready never answered:\n%s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		status, body := getPage("http://" + addr + "/ready")
		if status == 0 {
			continue
		}
		answers = append(answers, body)
		time.Sleep(time.Second) // what goes wrong in the background is logged meanwhile
		cancel()
		<-done
		return -1, stdout.String() + stderr.String(), answers
	}
}

// A start that fails on the Redis URL — Redis unreachable, or refusing
// the password — and a command line gone wrong say so without the
// password: not in the log (debug level), not in /ready's answer.
func TestPlantedSecretNeverInEdgeStartFailures(t *testing.T) {
	const planted = "PLANTED-edge-redis-6d0c"
	const realPass = "the-real-password-1f"
	// A server of the test's own, which a password may be set on.
	private := testsvc.PrivateRedis(t)
	require.NoError(t, private.ConfigSet(context.Background(), "requirepass", realPass).Err())
	sock := private.Options().Addr
	cases := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"redis unreachable", []string{"serve"}, map[string]string{"EUTERPE_REDIS_URL": "redis://:" + planted + "@" + freeAddr(t) + "/0"}},
		{"redis refuses the password", []string{"serve"}, map[string]string{"EUTERPE_REDIS_URL": "unix://:" + planted + "@" + sock}},
		{"redis refuses user and password", []string{"serve"}, map[string]string{"EUTERPE_REDIS_URL": "unix://euterpe:" + planted + "@" + sock}},
		{"redis URL as a flag", []string{"serve", "-redis-url", "redis://:" + planted + "@" + freeAddr(t) + "/0"}, nil},
		{"redis URL in a malformed flag", []string{"serve", "---redis-url=redis://:" + planted + "@h:6379/0"}, nil},
		{"redis URL as the command", []string{"redis://:" + planted + "@h:6379/0"}, nil},
		{"redis URL as a stray argument", []string{"serve", "redis://:" + planted + "@h:6379/0"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, logs, answers := runEdge(t, tc.args, tc.env)
			if code == 0 {
				t.Fatalf("exit 0:\n%s", logs)
			}
			if strings.TrimSpace(logs) == "" {
				t.Fatal("nothing said about the failure")
			}
			if code == -1 && !strings.Contains(strings.Join(answers, ""), `"redis":"error(`) {
				t.Fatalf("/ready does not report Redis failing: %q", answers)
			}
			for _, s := range append(answers, logs) {
				if strings.Contains(s, planted) {
					t.Fatalf("the password is out:\n%s", s)
				}
			}
		})
	}
}

// echoServer answers every request with status and a body quoting what the
// request carried (its URI, every header), and keeps what it was sent.
type echoServer struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []string
}

func newEchoServer(t *testing.T, status int) *echoServer {
	es := &echoServer{}
	es.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("a gzip body that is not gzip: %v", err)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		es.mu.Lock()
		es.bodies = append(es.bodies, string(b))
		es.mu.Unlock()
		var h strings.Builder
		for k, v := range r.Header {
			fmt.Fprintf(&h, "%s: %s; ", k, strings.Join(v, ","))
		}
		msg, _ := json.Marshal("refused " + r.Method + " " + r.URL.RequestURI() + " with " + h.String())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":"refused","message":%s}}`, msg)
	}))
	t.Cleanup(es.Close)
	return es
}

func (es *echoServer) sent() []string {
	es.mu.Lock()
	defer es.mu.Unlock()
	return append([]string(nil), es.bodies...)
}

// The edge's secrets — the LLM server's API key, a token in an http
// backend's URL, the sync secret — go out with requests to servers that
// refuse them and quote the request back. None of them is in the log
// (debug level), a job's answer or events, /ready, /metrics, or what the
// edge sent central.
func TestPlantedSecretNeverLeaksFromEdge(t *testing.T) {
	const llmKey = "PLANTED-llm-key-0b7e"
	const backendToken = "PLANTED-backend-token-3a91"
	const syncSecret = "PLANTED-sync-secret-58c4"
	_, opt := testsvc.Redis(t)
	llm := newEchoServer(t, http.StatusUnauthorized)
	rag := newEchoServer(t, http.StatusNotFound)
	central := newEchoServer(t, http.StatusUnauthorized)
	addr := freeAddr(t)
	env := map[string]string{
		"EUTERPE_EDGE_ADDR":      addr,
		"EUTERPE_STATE_DIR":      t.TempDir(),
		"EUTERPE_LOG_LEVEL":      "debug",
		"EUTERPE_REDIS_URL":      redisURLOf(opt),
		"EUTERPE_LLM_BASE_URL":   llm.URL,
		"EUTERPE_LLM_API_KEY":    llmKey,
		"EUTERPE_TASK_BACKENDS":  "chat=llm,embed=llm,rag=http:" + rag.URL + "/rag?v=2&key=" + backendToken,
		"EUTERPE_SYNC_URL":       central.URL,
		"EUTERPE_SYNC_EDGE_ID":   "jetson-leak-01",
		"EUTERPE_SYNC_SECRET":    syncSecret,
		"EUTERPE_SYNC_HEARTBEAT": "1s",
		"EUTERPE_SHUTDOWN_GRACE": "3s",
		"EUTERPE_WORKER_DRAIN":   "1s",
	}
	logs := &testsvc.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, logs, envMap(env)) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, "%s", logs)
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	}
	t.Cleanup(stop)
	base := "http://" + addr
	require.Eventually(t, func() bool { code, _ := getPage(base + "/healthz"); return code == http.StatusOK },
		10*time.Second, 20*time.Millisecond, "%s", logs)

	var answers []string
	var ids []string
	for _, job := range []string{`{"task":"chat","payload":{"prompt":"x"}}`, `{"task":"embed","payload":{"input":"x"}}`, `{"task":"rag","payload":{}}`} {
		code, body := httpDo(t, http.MethodPost, base+"/v1/jobs", job, map[string]string{"Content-Type": "application/json"})
		require.Equal(t, http.StatusAccepted, code, body)
		answers = append(answers, body)
		var cr struct {
			JobID string `json:"job_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &cr))
		ids = append(ids, cr.JobID)
	}
	for _, id := range ids {
		var body string
		require.Eventually(t, func() bool {
			_, body = getPage(base + "/v1/jobs/" + id)
			var j struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal([]byte(body), &j)
			return jobs.IsTerminal(j.Status)
		}, 20*time.Second, 20*time.Millisecond)
		require.Contains(t, body, "refused", "the job failed on the server's refusal")
		answers = append(answers, body)
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, err := http.NewRequestWithContext(sctx, http.MethodGet, base+"/v1/jobs/"+id+"/events", nil)
		require.NoError(t, err)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, string(b))
		}
		scancel()
	}
	// The heartbeat and the batches reached central, which refused them.
	require.Eventually(t, func() bool {
		all := strings.Join(central.sent(), "\n")
		return strings.Contains(all, `"events":[`) && strings.Contains(all, `"edge_id":"jetson-leak-01"`)
	}, 10*time.Second, 20*time.Millisecond, "a batch of events reaches central")
	for _, path := range []string{"/ready", "/metrics"} {
		_, body := getPage(base + path)
		answers = append(answers, body)
	}
	stop()

	for _, secret := range []string{llmKey, backendToken, syncSecret} {
		for name, values := range map[string][]string{
			"the log":           {logs.String()},
			"an HTTP answer":    answers,
			"a body to central": central.sent(),
		} {
			for _, v := range values {
				if strings.Contains(v, secret) {
					t.Errorf("%s is in %s:\n%s", secret, name, v)
				}
			}
		}
	}
}
