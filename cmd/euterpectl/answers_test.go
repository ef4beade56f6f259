package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A --server behind a proxy that redirects (http to https, a moved host)
// is refused with the target named: followed, a POST would arrive as a GET
// without its body — an enqueue printed the job list and exited 0 — and
// the token would go again wherever the answer pointed.
func TestRedirectIsRefused(t *testing.T) {
	var reached atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, `{"jobs":[{"job_id":"old"}]}`)
	}))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusMovedPermanently)
	}))
	defer redirect.Close()
	env := map[string]string{"EUTERPE_CENTRAL_URL": redirect.URL, "EUTERPE_OPERATOR_TOKEN": "eop_test", "EUTERPE_EDGE_URL": redirect.URL}
	for _, args := range [][]string{
		{"pipeline", "enqueue", "--type", "prices", "--symbol", "AAPL", "--asof", "2026-01-02"},
		{"jobs", "submit", "--task", "chat", "--payload", `{"prompt":"hi"}`},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			code, out, errOut := runCtlEnv(env, args...)
			require.Equal(t, 1, code, out)
			require.Empty(t, out)
			require.Contains(t, errOut, "redirect to "+target.URL)
			require.Contains(t, errOut, "use that URL as --server")
			require.Zero(t, reached.Load(), "the redirect was followed")
		})
	}
}

// edges events asks for pages small enough for its answer cap, and an
// answer past the cap is named as too large, not reported as a JSON EOF.
func TestEdgesEventsPageAndAnswerCap(t *testing.T) {
	const jobID = "0b6c2a5e-7f3c-4a8e-9c1d-2e4f6a8b0c1d"
	var limit atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit.Store(r.URL.Query().Get("limit"))
		_, _ = io.WriteString(w, `{"job":{"status":"running"},"events":[{"entry_id":"1-0","data":"`)
		chunk := strings.Repeat("x", 1<<20)
		for range maxCentralAnswer>>20 + 1 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}],"gaps":[]}`)
	}))
	defer srv.Close()
	env := map[string]string{"EUTERPE_CENTRAL_URL": srv.URL, "EUTERPE_OPERATOR_TOKEN": "eop_test"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, _, errOut := runCtlCtx(ctx, env, "edges", "events", "edge-1", jobID)
	require.Equal(t, 1, code)
	require.Equal(t, "100", limit.Load())
	require.Contains(t, errOut, "central's answer is over 64 MiB")
}
