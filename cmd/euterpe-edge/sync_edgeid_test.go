package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/ship"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// An edge disabled on central spools its jobs' events; re-registered and
// restarted under a new EUTERPE_SYNC_EDGE_ID with its state directory kept,
// it does not ship that backlog under the new id: the old sync.db is set
// aside in the state directory with the old id beside it, the start logs
// both ids at error level, and central gets only the events of the jobs
// run under the new id.
func TestEdgeRestartedUnderAnotherIDDoesNotShipTheOldSpool(t *testing.T) {
	rdb, opt := testsvc.Redis(t)
	rc := shiptest.NewReceiver(t, []byte(syncTestSecret))
	state := t.TempDir()
	env := func(edge string) map[string]string {
		return map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt), "EUTERPE_SYNC_URL": rc.URL,
			"EUTERPE_SYNC_EDGE_ID": edge, "EUTERPE_SYNC_SECRET": syncTestSecret, "EUTERPE_SYNC_BACKOFF_MAX": "1s",
			"EUTERPE_STATE_DIR": state, "EUTERPE_TASK_BACKENDS": "tool=exec:/bin/cat"}
	}

	rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		shiptest.Refuse(w, http.StatusForbidden, wire.CodeEdgeDisabled)
		return true
	})
	t.Run("disabled as jetson-1", func(t *testing.T) {
		base, logs := serveHealthy(t, env("jetson-1"))
		n := len(writtenEvents(t, rdb, "jetson-1", runJobs(t, base, 3)))
		require.Eventually(t, func() bool {
			return strings.Contains(metrics(t, base), fmt.Sprintf("euterpe_sync_spool_events %d\n", n))
		}, 20*time.Second, 20*time.Millisecond, "%s", logs)
	})
	rc.SetHook(nil)

	base, logs := serveHealthy(t, env("jetson-2"))
	want := writtenEvents(t, rdb, "jetson-2", runJobs(t, base, 2))
	require.Eventually(t, func() bool { return rc.Count() >= len(want) }, 20*time.Second, 20*time.Millisecond, "%s", logs)
	time.Sleep(500 * time.Millisecond) // anything more would have come by now
	assert.Equal(t, want, rc.Events(), "only the new id's jobs")
	assert.Empty(t, rc.Gaps())

	idFile := filepath.Join(state, ship.EdgeIDFile)
	got, err := os.ReadFile(idFile)
	require.NoError(t, err)
	assert.Equal(t, "jetson-2\n", string(got))
	asides, err := filepath.Glob(filepath.Join(state, spool.File+".edge-changed-*[0-9]"))
	require.NoError(t, err)
	require.Len(t, asides, 1)
	got, err = os.ReadFile(asides[0] + "." + ship.EdgeIDFile)
	require.NoError(t, err)
	assert.Equal(t, "jetson-1\n", string(got))
	var said []map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "set aside and not shipped") {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), line)
			said = append(said, m)
		}
	}
	require.Len(t, said, 1, "logged once:\n%s", logs)
	for k, v := range map[string]string{"level": "ERROR", "edge_id": "jetson-2", "spool_edge_id": "jetson-1",
		"edge_id_file": idFile, "set_aside": asides[0]} {
		assert.Equal(t, v, said[0][k], k)
	}
}

func metrics(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}
