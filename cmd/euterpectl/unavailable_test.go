package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unavailableProxy forwards to target, except that the first n requests
// for a job's events are answered as an edge that cannot reach Redis
// answers them: 503 unavailable.
func unavailableProxy(t *testing.T, target string, n int64) string {
	t.Helper()
	u, err := neturl.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	var refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") && refused.Add(1) <= n {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"redis: connection refused"}}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// An edge busy or briefly away (503, 429) while a job is followed is
// waited out like a dropped connection: the exit status is still the
// job's outcome, not a failure the job never had. An edge that stays
// away ends the follow with its answer.
func TestFollowWaitsOutUnavailableEdge(t *testing.T) {
	url, store := startGateway(t)
	worker(t, store, true)
	proxy := unavailableProxy(t, url, 2)
	code, out, errOut := runCtl("jobs", "submit", "--server", proxy, "--task", "chat", "--payload", `{}`, "--follow")
	assert.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 2, out)
	assert.Contains(t, lines[len(lines)-1], `"type":"done"`)

	var cr struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &cr))
	code, _, errOut = runCtl("jobs", "events", "--server", unavailableProxy(t, url, 1000), cr.JobID)
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, errOut, "503")
	assert.Contains(t, errOut, "(unavailable)")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
}
