package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// Central is down while the edge runs 1,000 jobs; started afterwards, it
// gets every event exactly once, in entry order per job, and every job is
// done in edge_jobs.
func TestCentralDownWhileEdgeRunsJobs(t *testing.T) {
	for _, eng := range sqltest.Engines {
		t.Run(string(eng), func(t *testing.T) {
			c := newCentral(t, eng)
			e := newEdge(t, c, "EUTERPE_TASK_BACKENDS=tool=http:"+toolServer(t))
			e.start()
			ids := submit(t, e, "tool", `{"n":1}`, 1000)
			waitDone(t, e.rdb, ids, 90*time.Second)
			want := written(t, e.rdb, ids)
			n := 0
			for _, w := range want {
				n += len(w)
			}
			require.Zero(t, c.count(`SELECT COUNT(*) FROM edge_events`), "central was down")
			t.Logf("%d jobs wrote %d events while central was down", len(ids), n)

			c.start()
			c.waitEvents(n, 60*time.Second)
			checkExactlyOnce(t, c, want)
			e.proc.stop(t)
			c.proc.stop(t)
			c.noSecretLogged(e.proc, c.proc)
		})
	}
}
