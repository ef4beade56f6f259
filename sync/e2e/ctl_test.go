package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// euterpectl runs the built CLI against central with the operator token
// in the environment and returns its stdout as JSON lines.
func (c *central) euterpectl(args ...string) []map[string]any {
	c.t.Helper()
	cmd := exec.Command(bins["euterpectl"], args...)
	cmd.Env = append(baseEnv(), "EUTERPE_CENTRAL_URL="+c.URL, "EUTERPE_OPERATOR_TOKEN="+c.Token)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(c.t, err, "euterpectl %v: %s", args, stderr.String())
	assert.NotContains(c.t, string(out)+stderr.String(), c.Token, "euterpectl printed the token")
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(c.t, json.Unmarshal([]byte(l), &m), "euterpectl %v line %q", args, l)
		lines = append(lines, m)
	}
	return lines
}

// euterpectl edges list, edges jobs and edges events against the real
// central show the edge, its synced jobs (done) and each job's events in
// entry order.
func TestEuterpectlShowsTheSyncedJob(t *testing.T) {
	for _, eng := range sqltest.Engines {
		t.Run(string(eng), func(t *testing.T) {
			c := newCentral(t, eng)
			c.start()
			e := newEdge(t, c, "EUTERPE_TASK_BACKENDS=tool=http:"+toolServer(t))
			e.start()
			ids := submit(t, e, "tool", `{"n":1}`, 3)
			waitDone(t, e.rdb, ids, 30*time.Second)
			want := written(t, e.rdb, ids)
			c.waitEvents(9, 30*time.Second)

			edges := c.euterpectl("edges", "list")
			require.Len(t, edges, 1)
			assert.Equal(t, c.EdgeID, edges[0]["edge_id"])
			assert.Equal(t, "e2e-edge", edges[0]["name"])
			assert.EqualValues(t, 9, edges[0]["events_total"])

			jobsOut := c.euterpectl("edges", "jobs", c.EdgeID)
			require.Len(t, jobsOut, len(ids))
			for _, j := range jobsOut {
				id, _ := j["job_id"].(string)
				assert.Contains(t, want, id)
				assert.Equal(t, "done", j["status"])
				assert.Equal(t, "tool", j["task"])
				assert.EqualValues(t, 3, j["events"])
			}

			for _, id := range ids {
				evs := c.euterpectl("edges", "events", c.EdgeID, id)
				require.Len(t, evs, len(want[id]), "job %s", id)
				for i, ev := range evs {
					assert.Equal(t, want[id][i].Entry, ev["entry_id"])
					assert.Equal(t, want[id][i].Type, ev["type"])
					assert.Equal(t, id, ev["job_id"])
				}
			}
			e.proc.stop(t)
			c.proc.stop(t)
			c.noSecretLogged(e.proc, c.proc)
		})
	}
}
