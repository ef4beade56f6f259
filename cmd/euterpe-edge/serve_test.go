package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

func envMap(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// serveHealthy runs `serve` in this process with env and a free address
// until the test ends, and returns once /healthz answers: its base URL and
// its log. It fails the test if serve stops first.
func serveHealthy(t *testing.T, env map[string]string) (base string, logs *testsvc.LogBuffer) {
	t.Helper()
	logs = &testsvc.LogBuffer{}
	addr := freeAddr(t)
	env["EUTERPE_EDGE_ADDR"] = addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, logs, envMap(env)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	})
	base = "http://" + addr
	stopped := false
	require.Eventually(t, func() bool {
		select {
		case code := <-done:
			done <- code
			stopped = true
			return true
		default:
		}
		code, _ := getPage(base + "/healthz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "%s", logs)
	require.False(t, stopped, "serve stopped:\n%s", logs)
	return base, logs
}

// getPage GETs url and returns the status and body; 0 and the error's text
// when it cannot be reached.
func getPage(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestBadSettingStopsWithOneLineNamingIt(t *testing.T) {
	tests := []struct {
		env     map[string]string
		args    []string
		setting string
	}{
		{map[string]string{"EUTERPE_EDGE_ADDR": "nohost"}, nil, "EUTERPE_EDGE_ADDR"},
		{map[string]string{"EUTERPE_REDIS_URL": "http://x"}, nil, "EUTERPE_REDIS_URL"},
		{map[string]string{"EUTERPE_STATE_DIR": "relative/dir"}, nil, "EUTERPE_STATE_DIR"},
		{map[string]string{"EUTERPE_SHUTDOWN_GRACE": "soon"}, nil, "EUTERPE_SHUTDOWN_GRACE"},
		// Components would get no time to return: every stop would be reported as one they did not make.
		{map[string]string{"EUTERPE_EDGE_ADDR": "127.0.0.1:0", "EUTERPE_SHUTDOWN_GRACE": "0s", "EUTERPE_WORKER_DRAIN": "0"}, nil, "EUTERPE_SHUTDOWN_GRACE"},
		{map[string]string{"EUTERPE_LOG_LEVEL": "loud"}, nil, "EUTERPE_LOG_LEVEL"},
		{map[string]string{"EUTERPE_JOB_TTL_S": "0"}, nil, "EUTERPE_JOB_TTL_S"},
		{map[string]string{"EUTERPE_MAX_BODY_BYTES": "lots"}, nil, "EUTERPE_MAX_BODY_BYTES"},
		{map[string]string{"EUTERPE_BACKLOG_LIMIT": "-1"}, nil, "EUTERPE_BACKLOG_LIMIT"},
		{map[string]string{"EUTERPE_SSE_HEARTBEAT": "1h"}, nil, "EUTERPE_SSE_HEARTBEAT"},
		{map[string]string{"EUTERPE_REDIS_POOL_SIZE": "1"}, nil, "EUTERPE_REDIS_POOL_SIZE"},
		{nil, []string{"-backlog-limit", "x"}, "-backlog-limit"},
		// Relations between settings, each valid alone.
		{map[string]string{"EUTERPE_EDGE_ADDR": "127.0.0.1:0", "EUTERPE_QUEUE_MAXLEN": "100", "EUTERPE_BACKLOG_LIMIT": "10000"}, nil, "EUTERPE_QUEUE_MAXLEN"},
		{map[string]string{"EUTERPE_EDGE_ADDR": "127.0.0.1:0", "EUTERPE_WORKER_DRAIN": "10s", "EUTERPE_SHUTDOWN_GRACE": "10s"}, nil, "EUTERPE_WORKER_DRAIN"},
		{map[string]string{"EUTERPE_EDGE_ADDR": "127.0.0.1:0", "EUTERPE_JOB_TTL_S": "1000", "EUTERPE_JOB_MAX_TTL_S": "100"}, nil, "EUTERPE_JOB_TTL_S"},
		{map[string]string{"EUTERPE_EDGE_ADDR": "127.0.0.1:0", "EUTERPE_CLAIM_IDLE": "2m", "EUTERPE_JOB_TTL_S": "60"}, nil, "EUTERPE_CLAIM_IDLE"},
	}
	for _, tt := range tests {
		t.Run(tt.setting, func(t *testing.T) {
			var stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a daemon that starts is stopped
			defer cancel()
			code := run(ctx, append([]string{"serve"}, tt.args...), io.Discard, &stderr, envMap(tt.env))
			assert.Equal(t, 2, code)
			out := strings.TrimSpace(stderr.String())
			assert.NotContains(t, out, "\n", "one line")
			assert.Contains(t, out, tt.setting)
		})
	}
}

func TestRedisPasswordNotEchoed(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve"}, io.Discard, &stderr, envMap(map[string]string{"EUTERPE_REDIS_URL": "ftp://:hunter2@x"}))
	assert.Equal(t, 2, code)
	assert.NotContains(t, stderr.String(), "hunter2")
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"version"}, &out, io.Discard, envMap(nil)))
	assert.Equal(t, daemon.Version+"\n", out.String())
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// serveInProcess runs `serve` until the test ends and returns its base URL.
func serveInProcess(t *testing.T, env map[string]string) string {
	t.Helper()
	addr := freeAddr(t)
	env["EUTERPE_EDGE_ADDR"] = addr
	if env["EUTERPE_STATE_DIR"] == "" {
		env["EUTERPE_STATE_DIR"] = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- run(ctx, []string{"serve"}, io.Discard, io.Discard, envMap(env)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, 0, code)
		case <-time.After(10 * time.Second):
			t.Error("serve did not stop")
		}
	})
	base := "http://" + addr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
	return base
}

func TestReadyReportsRedis(t *testing.T) {
	_, opt := testsvc.Redis(t)
	up := serveInProcess(t, map[string]string{"EUTERPE_REDIS_URL": fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB)})
	resp, err := http.Get(up + "/ready")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	down := serveInProcess(t, map[string]string{"EUTERPE_REDIS_URL": "redis://" + freeAddr(t) + "/0"})
	resp, err = http.Get(down + "/ready")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Contains(t, body["redis"], "error(")
	resp, err = http.Get(down + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// The watchdog is fed only while the Redis ping serve uses succeeds.
func TestWatchdogGatedOnRedis(t *testing.T) {
	_, opt := testsvc.Redis(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("redis up", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: opt.Addr, MaxRetries: -1})
		defer rdb.Close()
		// Each check may take a whole period, which has to hold a fresh
		// dial, handshake and PING on a starved machine; the loop ends at
		// the first ping rather than after a fixed time.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var pings atomic.Int32
		daemon.WatchdogLoop(ctx, 200*time.Millisecond, func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
			func() { pings.Add(1); cancel() }, log)
		assert.Positive(t, pings.Load(), "no ping within 10 s while Redis answers")
	})
	t.Run("redis down", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: freeAddr(t), MaxRetries: -1})
		defer rdb.Close()
		// Counted checks, not a fixed time: a starved loop that made no
		// check at all would show no ping either.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var checks, pings atomic.Int32
		daemon.WatchdogLoop(ctx, 20*time.Millisecond, func(ctx context.Context) error {
			err := rdb.Ping(ctx).Err()
			if checks.Add(1) >= 5 {
				cancel()
			}
			return err
		}, func() { pings.Add(1) }, log)
		assert.GreaterOrEqual(t, checks.Load(), int32(5), "checks made")
		assert.Zero(t, pings.Load(), "pings while Redis is down")
	})
}

func TestSystemdUnitVerifies(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not installed (apt-get install systemd)")
		}
		t.Skip("systemd-analyze not installed")
	}
	unit, err := os.ReadFile("../../systemd/euterpe-edge.service")
	require.NoError(t, err)
	for _, want := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "After=network-online.target redis-server.service",
		"Wants=redis-server.service", "EnvironmentFile=-/etc/euterpe/edge.env", "StateDirectory=euterpe", "ProtectSystem=strict", "RestartPreventExitStatus=2",
		"NoNewPrivileges=yes", "PrivateTmp=yes", "User=euterpe"} {
		assert.Contains(t, string(unit), want)
	}
	self, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "euterpe-edge.service")
	require.NoError(t, os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/bin/euterpe-edge"), []byte(self)), 0o644))
	out, err := exec.Command(tool, "verify", path).CombinedOutput()
	assert.NoError(t, err, "%s", out)
	assert.Empty(t, strings.TrimSpace(string(out)))
}

func TestMetricsEndpoint(t *testing.T) {
	_, opt := testsvc.Redis(t)
	base := serveInProcess(t, map[string]string{"EUTERPE_REDIS_URL": fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB)})
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "go_goroutines ")
	assert.Contains(t, string(body), "process_start_time_seconds ")
}

// DNS rebinding: a page on a name its owner re-points at 127.0.0.1 sends
// what the browser sees as same-origin requests (Sec-Fetch-Site
// same-origin, Origin equal to Host). The edge has no sign-in, so without a
// Host check that page could submit and cancel jobs, trash library files
// and read the console. It is refused; the daemon's own names are not.
func TestDNSRebindingRefused(t *testing.T) {
	_, opt := testsvc.Redis(t)
	base := serveInProcess(t, map[string]string{
		"EUTERPE_REDIS_URL":     fmt.Sprintf("redis://%s/%d", opt.Addr, opt.DB),
		"EUTERPE_TASK_BACKENDS": "tool=exec:/bin/cat",
	})
	port := base[strings.LastIndex(base, ":")+1:]
	do := func(host, method, path, body string) int {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	evil := "rebind.attacker.example:" + port
	assert.Equal(t, http.StatusMisdirectedRequest, do(evil, "POST", "/v1/jobs", `{"task":"tool","payload":{"x":1}}`))
	assert.Equal(t, http.StatusMisdirectedRequest, do(evil, "GET", "/ui/", ""))
	assert.Equal(t, http.StatusOK, do(evil, "GET", "/healthz", ""), "probes answer any name")
	for _, own := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		assert.Equal(t, http.StatusAccepted, do(own, "POST", "/v1/jobs", `{"task":"tool","payload":{"x":1}}`), own)
	}
}

// An argument serve does not take stops it with one line naming the
// argument, before anything starts: flag parsing ends at the first
// positional argument, so the flags after it would otherwise be dropped
// without a word and the daemon would start on their defaults.
func TestStrayArgumentRefused(t *testing.T) {
	cases := []struct {
		name string
		args []string
	}{
		{"alone", []string{"stray"}},
		{"before a flag", []string{"stray", "-addr", "127.0.0.1:0"}},
		{"after a flag", []string{"-addr", "127.0.0.1:0", "stray"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			// Nothing listens on port 1: a daemon that wrongly starts
			// reaches no Redis at all.
			env := map[string]string{"EUTERPE_REDIS_URL": "redis://127.0.0.1:1/0", "EUTERPE_STATE_DIR": state, "EUTERPE_EDGE_ADDR": "127.0.0.1:0"}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var stderr bytes.Buffer
			code := run(ctx, append([]string{"serve"}, tc.args...), io.Discard, &stderr, envMap(env))
			assert.Equal(t, 2, code, stderr.String())
			out := strings.TrimSpace(stderr.String())
			assert.NotContains(t, out, "\n", "one line")
			assert.Contains(t, out, "stray")
			entries, err := os.ReadDir(state)
			require.NoError(t, err)
			assert.Empty(t, entries, "nothing written before the arguments were checked")
		})
	}
}

// -h after serve lists the settings and exits 0, starting nothing.
func TestServeHelpFlag(t *testing.T) {
	for _, flag := range []string{"-h", "-help", "--help"} {
		t.Run(flag, func(t *testing.T) {
			state := t.TempDir()
			env := map[string]string{"EUTERPE_REDIS_URL": "redis://127.0.0.1:1/0", "EUTERPE_STATE_DIR": state}
			var stderr bytes.Buffer
			code := run(context.Background(), []string{"serve", flag}, io.Discard, &stderr, envMap(env))
			assert.Equal(t, 0, code, stderr.String())
			assert.Contains(t, stderr.String(), "EUTERPE_REDIS_URL")
			entries, err := os.ReadDir(state)
			require.NoError(t, err)
			assert.Empty(t, entries)
		})
	}
}
