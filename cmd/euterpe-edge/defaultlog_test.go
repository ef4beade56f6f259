package main

import (
	"context"
	"encoding/json"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// What logs through slog's default logger or the standard log package
// once serve runs (a library's fallback, net/http) writes JSON lines to the
// daemon's log with secrets redacted, like every other line. A secret
// setting given as a flag is warned about, naming the flag and never the
// value: every local user can read a command line.
func TestServeLogsStrayOutputAsJSONAndWarnsOfSecretFlags(t *testing.T) {
	_, opt := testsvc.Redis(t)
	testsvc.KeepDefaultLog(t)
	// A misspelled variable is named with the setting it most likely means.
	t.Setenv("EUTERPE_SHUTDOWN_GRCAE", "hunter2-misspelled")
	logs := &testsvc.LogBuffer{}
	addr := freeAddr(t)
	redisURL := redisURLOf(opt)
	env := map[string]string{"EUTERPE_EDGE_ADDR": addr, "EUTERPE_STATE_DIR": t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "-redis-url", redisURL}, io.Discard, logs, envMap(env)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			assert.Equal(t, 0, code, "%s", logs)
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	})
	require.Eventually(t, func() bool {
		code, _ := getPage("http://" + addr + "/healthz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "%s", logs)

	slog.Default().Warn("through slog's default", "password", "hunter2-default")
	stdlog.Print("through the standard log: redis://:hunter2-stdlib@10.0.0.5:6379")

	var warned, misspelled, viaDefault, viaStdlib bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "not a JSON line: %q", line)
		msg, _ := rec["msg"].(string)
		switch {
		case rec["flag"] == "-redis-url":
			warned = true
			assert.Equal(t, "WARN", rec["level"])
			assert.Contains(t, msg, "/proc/<pid>/cmdline")
			assert.Contains(t, msg, "EUTERPE_REDIS_URL_FILE")
			assert.NotContains(t, line, redisURL, "the value is not repeated")
		case rec["variable"] == "EUTERPE_SHUTDOWN_GRCAE":
			misspelled = true
			assert.Equal(t, "WARN", rec["level"])
			assert.Equal(t, "EUTERPE_SHUTDOWN_GRACE", rec["setting"])
		case msg == "through slog's default":
			viaDefault = true
			assert.Equal(t, "[REDACTED]", rec["password"])
		case strings.HasPrefix(msg, "through the standard log"):
			viaStdlib = true
		}
	}
	assert.True(t, warned, "no warning naming -redis-url:\n%s", logs)
	assert.True(t, misspelled, "no warning naming EUTERPE_SHUTDOWN_GRCAE:\n%s", logs)
	assert.True(t, viaDefault, "slog's default does not write to the daemon's log:\n%s", logs)
	assert.True(t, viaStdlib, "the standard log does not write to the daemon's log:\n%s", logs)
	assert.NotContains(t, logs.String(), "hunter2")
}
