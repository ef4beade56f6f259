package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// A library database that cannot be opened at start does not stop the
// edge: here library.db is a link onto a card that is not mounted yet (a
// full disk or a read-only file system fail the open the same way). The
// gateway and the workers run their jobs, the library's routes answer 503,
// the failure is logged once, /metrics says the library is not open, the
// console's library page answers 503 saying why (not "the library is
// off"), and once the card is there the library opens and answers.
func TestEdgeRunsJobsWhileTheLibraryCannotBeOpened(t *testing.T) {
	_, opt := testsvc.Redis(t)
	state, card, root := t.TempDir(), filepath.Join(t.TempDir(), "card"), t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(card, "library.db"), filepath.Join(state, "library.db")))
	env := map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt), "EUTERPE_LIBRARY_ROOTS": root,
		"EUTERPE_STATE_DIR": state, "EUTERPE_LOG_LEVEL": "debug",
		"EUTERPE_TASK_BACKENDS": "tool=exec:/bin/cat"}
	base, logs := serveHealthy(t, env)

	runJobs(t, base, 2)
	get := func(path string) (int, string) { return getPage(base + path) }
	for _, path := range []string{"/api/v1/jobs", "/api/v1/duplicates/groups", "/api/v1/files/1/thumbnail"} {
		code, body := get(path)
		assert.Equal(t, http.StatusServiceUnavailable, code, path)
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		assert.Equal(t, "library_unavailable", e.Error.Code, body)
	}
	resp, err := http.Post(base+"/api/v1/scans", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	code, body := get("/ready")
	assert.Equal(t, http.StatusOK, code, "a library that is not open leaves the jobs ready: %s", body)

	time.Sleep(2 * time.Second) // several attempts to open the library
	assert.Equal(t, 1, strings.Count(logs.String(), "cannot open the library database"), "logged once:\n%s", logs)
	_, metrics := get("/metrics")
	assert.Contains(t, metrics, "euterpe_edge_library_open 0")
	code, body = get("/ui/library")
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Contains(t, body, "the library database cannot be opened")
	assert.Contains(t, body, "jobs run as usual; retrying")
	assert.Contains(t, body, "unable to open database file", "the page says why")
	assert.NotContains(t, body, "The media library is off")
	_, body = get("/ui/queue")
	assert.Contains(t, body, "the library database cannot be opened")
	assert.NotContains(t, body, "not configured")

	require.NoError(t, os.Mkdir(card, 0o700))
	require.Eventually(t, func() bool {
		code, _ := get("/api/v1/jobs")
		return code == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "%s", logs)
	_, metrics = get("/metrics")
	assert.Contains(t, metrics, "euterpe_edge_library_open 1")
	assert.Equal(t, 1, strings.Count(logs.String(), "the library database is open"), "%s", logs)
	code, body = get("/ui/library")
	assert.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "Scan progress")
	_, err = os.Stat(filepath.Join(card, "library.db"))
	assert.NoError(t, err, "the database is where the link points")
}

// A state directory that cannot be written on a first start (a link onto a
// card not mounted, as a full or read-only one) does not stop the edge: the
// worker identity holds for this run only, with a warning, and jobs run.
func TestEdgeRunsJobsWhenTheStateDirectoryCannotBeWritten(t *testing.T) {
	_, opt := testsvc.Redis(t)
	state := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "card", "state"), state))
	env := map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt), "EUTERPE_LIBRARY_ROOTS": t.TempDir(),
		"EUTERPE_STATE_DIR": state, "EUTERPE_TASK_BACKENDS": "tool=exec:/bin/cat"}
	base, logs := serveHealthy(t, env)
	runJobs(t, base, 1)
	assert.Contains(t, logs.String(), "the worker identity cannot be kept in the state directory")
}
