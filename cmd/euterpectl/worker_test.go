package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
	edgeworker "github.com/vesta-cx/euterpe/edge/worker"
)

// startStack is a gateway plus a real worker pool whose backends are real
// programs: chat echoes its payload (cat), tool fails (false) and code runs
// until it is cancelled (sleep).
func startStack(t *testing.T) string {
	t.Helper()
	url, store := startGateway(t)
	s := edgeworker.DefaultSettings()
	s.Block = 100 * time.Millisecond
	s.CancelPoll = 100 * time.Millisecond
	s.Drain = 200 * time.Millisecond
	s.Backend.Tasks = "chat=exec:cat,tool=exec:false,code=exec:sleep 30"
	reg, err := backend.New(s.Backend, nil)
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := edgeworker.New(log, store.Redis(), store, "ctl-test", s, reg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Error("worker pool did not stop")
		}
	})
	return url
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// A followed job that ends in error makes submit exit non-zero, after
// printing the error event.
func TestSubmitFollowErrorExitsNonZero(t *testing.T) {
	url := startStack(t)
	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "tool", "--payload", `{"x":1}`, "--follow")
	assert.Equal(t, 1, code, errOut)
	last := lastLine(out)
	assert.Contains(t, last, `"type":"error"`)
	assert.Contains(t, last, `"code":"backend_error"`)
}

// --payload @file reads the payload from a file; a missing or invalid file
// is a usage error and submits nothing.
func TestSubmitPayloadFromFile(t *testing.T) {
	url := startStack(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "payload.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"from": "file", "n": [1, 2]}`+"\n"), 0o600))
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"from": `), 0o600))

	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", "@"+good, "--follow")
	require.Equal(t, 0, code, errOut)
	var ev struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(lastLine(out)), &ev))
	assert.Equal(t, "done", ev.Type)
	assert.JSONEq(t, `{"from":"file","n":[1,2]}`, string(ev.Data), "the worker got the file's payload")

	for _, tc := range []struct{ arg, msg string }{
		{"@" + filepath.Join(dir, "missing.json"), "no such file"},
		{"@" + bad, "not valid JSON"},
	} {
		code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", tc.arg)
		assert.Equal(t, 2, code)
		assert.Empty(t, out)
		assert.Contains(t, errOut, tc.msg)
	}
}

// Cancelling a job while its backend runs succeeds (200, status canceled),
// stops the backend and ends the event stream with canceled.
func TestCancelRunningJob(t *testing.T) {
	url := startStack(t)
	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "code", "--payload", `{}`)
	require.Equal(t, 0, code, errOut)
	var cr struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &cr))
	require.Eventually(t, func() bool {
		_, out, _ := runCtl("jobs", "get", "--server", url, cr.JobID)
		return strings.Contains(out, `"status": "`+jobs.Running+`"`)
	}, 10*time.Second, 20*time.Millisecond, "job never ran")

	code, out, errOut = runCtl("jobs", "cancel", "--server", url, cr.JobID)
	require.Equal(t, 0, code, errOut)
	assert.JSONEq(t, `{"job_id":"`+cr.JobID+`","status":"canceled"}`, out)

	code, out, _ = runCtl("jobs", "events", "--server", url, cr.JobID)
	assert.Equal(t, 1, code)
	assert.Contains(t, lastLine(out), `"type":"canceled"`)
	assert.Equal(t, 1, strings.Count(out, `"type":"canceled"`)+strings.Count(out, `"type":"done"`)+strings.Count(out, `"type":"error"`),
		"exactly one terminal event")
}
