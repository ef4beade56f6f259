package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Against a server that accepts and never answers, every command gives up
// after --timeout and says so, rather than waiting for ever: a request
// that is not a stream within that time for its whole answer, a stream
// (a job's events, the fleet tail) for its headers.
func TestSilentServerTimesOut(t *testing.T) {
	defer func(d time.Duration) { followPause = d }(followPause)
	followPause = 10 * time.Millisecond
	url := testsvc.SilentServer(t)
	env := map[string]string{"EUTERPE_CENTRAL_URL": url, "EUTERPE_EDGE_URL": url, "EUTERPE_OPERATOR_TOKEN": "eop_t"}
	const id = "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d"
	for _, args := range [][]string{
		{"jobs", "get", id},
		{"jobs", "cancel", id},
		{"jobs", "submit", "--task", "chat", "--payload", "{}"},
		{"jobs", "events", id},
		{"edges", "list"},
		{"edges", "get", "edge-1"},
		{"edges", "jobs", "edge-1"},
		{"edges", "events", "edge-1", id},
		{"pipeline", "enqueue", "--type", "edge_daily", "--symbol", "edge-1", "--asof", "2026-01-02"},
		{"pipeline", "get", id},
		{"pipeline", "redrive", id},
		{"pipeline", "list"},
		{"pipeline", "dlq"},
		{"pipeline", "refused"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code, out, errOut := runCtlCtx(ctx, env, append(args, "--timeout", "200ms")...)
			require.NoError(t, ctx.Err(), "still waiting: %s", errOut)
			assert.Equal(t, 1, code, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, "no answer within 200ms (--timeout)")
			assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		})
	}

	// The tail reconnects for ever by design; each stream that never
	// started is named as such.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	code, _, errOut := runCtlCtx(ctx, env, "edges", "tail", "--timeout", "200ms")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "tail: no answer within 200ms (--timeout)")
}

// --timeout bounds the wait for a stream's start, not the stream: a job
// that runs for longer is followed to its end.
func TestTimeoutDoesNotEndAStream(t *testing.T) {
	url, store := startGateway(t)
	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", `{}`)
	require.Equal(t, 0, code, errOut)
	var cr struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &cr))
	go func() {
		time.Sleep(3 * time.Second) // three times the --timeout
		ctx := context.Background()
		if _, err := store.SetRunning(ctx, cr.JobID, "w", nil); err == nil {
			_, _ = store.Finish(ctx, cr.JobID, jobs.Done, "w", json.RawMessage(`{"ok":true}`), nil, "")
		}
	}()
	code, out, errOut = runCtl("jobs", "events", "--server", url, "--timeout", "1s", cr.JobID)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"ok":true`)
	assert.Empty(t, errOut)
}

// An answer whose headers came but whose body stalls is bounded too.
func TestStalledAnswerTimesOut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"edges":[`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	env := map[string]string{"EUTERPE_CENTRAL_URL": srv.URL, "EUTERPE_EDGE_URL": srv.URL, "EUTERPE_OPERATOR_TOKEN": "eop_t"}
	for _, args := range [][]string{
		{"jobs", "get", "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d"},
		{"edges", "list"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		code, _, errOut := runCtlCtx(ctx, env, append(args, "--timeout", "300ms")...)
		require.NoError(t, ctx.Err(), "%v still waiting", args)
		cancel()
		assert.Equal(t, 1, code, errOut)
		assert.Contains(t, errOut, "did not arrive in full within 300ms (--timeout)", "%v", args)
	}
}
