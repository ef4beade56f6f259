package main

import (
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
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// A spool that cannot be opened at start does not stop the edge: here
// sync.db is a link onto a card that is not mounted yet (a full disk or a
// read-only file system fail spool.Open the same way). The gateway and
// the workers run their jobs, the failure is logged once, /metrics says
// the spool is not open, and once the card is there every event the jobs
// wrote meanwhile is shipped.
func TestEdgeRunsJobsWhileTheSpoolCannotBeOpened(t *testing.T) {
	rdb, opt := testsvc.Redis(t)
	rc := shiptest.NewReceiver(t, []byte(syncTestSecret))
	state, card := t.TempDir(), filepath.Join(t.TempDir(), "card")
	require.NoError(t, os.Symlink(filepath.Join(card, spool.File), filepath.Join(state, spool.File)))
	env := map[string]string{"EUTERPE_REDIS_URL": redisURLOf(opt), "EUTERPE_SYNC_URL": rc.URL,
		"EUTERPE_SYNC_EDGE_ID": "jetson-1", "EUTERPE_SYNC_SECRET": syncTestSecret, "EUTERPE_SYNC_BACKOFF_MAX": "1s",
		"EUTERPE_STATE_DIR": state, "EUTERPE_LOG_LEVEL": "debug",
		"EUTERPE_TASK_BACKENDS": "tool=exec:/bin/cat"}
	base, logs := serveHealthy(t, env)

	ids := runJobs(t, base, 3)
	want := writtenEvents(t, rdb, "jetson-1", ids)
	time.Sleep(2 * time.Second) // several attempts to open the spool
	assert.Zero(t, rc.Count())
	assert.Equal(t, 1, strings.Count(logs.String(), "cannot open the spool"), "logged once:\n%s", logs)
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), "euterpe_sync_spool_open 0")

	require.NoError(t, os.Mkdir(card, 0o700))
	require.Eventually(t, func() bool { return rc.Count() == len(want) }, 20*time.Second, 20*time.Millisecond, "%s", logs)
	assert.Equal(t, want, rc.Events())
	_, err = os.Stat(filepath.Join(card, spool.File))
	assert.NoError(t, err, "the spool is where the link points")
}
