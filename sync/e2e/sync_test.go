package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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
			// The edge's own count agrees: every event shipped once, none
			// left in the spool.
			require.Eventually(t, func() bool { return e.metric("euterpe_sync_shipped_events_total") == n },
				10*time.Second, 20*time.Millisecond, "the edge counts %d events shipped", n)
			require.Zero(t, e.metric("euterpe_sync_spool_events"))
			e.proc.stop(t)
			c.proc.stop(t)
			c.noSecretLogged(e.proc, c.proc)
		})
	}
}

// backlog runs jobs with many deltas on an edge while central is down, so
// shipping takes many batches; it returns what the edge wrote and its total.
func backlog(t *testing.T, c *central, jobs int, extra ...string) (*edge, map[string][]event, int) {
	t.Helper()
	e := newEdge(t, c, append([]string{"EUTERPE_TASK_BACKENDS=chat=llm", "EUTERPE_LLM_BASE_URL=" + llmServer(t, 20, 8), "EUTERPE_DELTA_BYTES=1"}, extra...)...)
	e.start()
	ids := submit(t, e, "chat", `{"prompt":"x"}`, jobs)
	waitDone(t, e.rdb, ids, 90*time.Second)
	want := written(t, e.rdb, ids)
	n := 0
	for _, w := range want {
		n += len(w)
	}
	t.Logf("%d jobs wrote %d events while central was down", jobs, n)
	return e, want, n
}

// firstRows waits (polling fast) until central has stored some but not all
// of the edge's events, and returns how many.
func firstRows(t *testing.T, c *central, total int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if n := c.count(`SELECT COUNT(*) FROM edge_events`); n > 0 {
			require.Less(t, n, total, "shipping ended before the kill")
			return n
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("nothing was shipped")
	return 0
}

// SIGKILL of the edge process while it ships a large backlog, in the worst
// window: central has stored the batch in flight and its answer has not
// reached the edge (a proxy withholds it). Restarted on the same state
// directory and Redis, the edge resends that batch and the rest: every event
// is stored once. Separately, SIGKILL of central mid-ingest (as soon as its
// first batch is stored, while the edge goes on sending) and a restart: the
// same.
func TestSIGKILLMidShippingLosesAndDuplicatesNothing(t *testing.T) {
	for _, eng := range sqltest.Engines {
		t.Run(string(eng)+"/edge", func(t *testing.T) {
			c := newCentral(t, eng)
			// The edge's EUTERPE_SYNC_URL is the proxy (a later setting wins).
			px := newHoldProxy(t, c.URL)
			e, want, total := backlog(t, c, 300, "EUTERPE_SYNC_URL="+px.URL)
			c.start()
			select {
			case <-px.held:
			case <-time.After(30 * time.Second):
				t.Fatal("no batch was stored")
			}
			e.proc.kill()
			at := c.count(`SELECT COUNT(*) FROM edge_events`)
			require.Positive(t, at)
			require.Less(t, at, total)
			t.Logf("edge killed with a batch stored but unanswered, %d of %d events on central", at, total)
			e.start()
			c.waitEvents(total, 60*time.Second)
			checkExactlyOnce(t, c, want)
			assert.GreaterOrEqual(t, scrape(t, c.URL, `euterpe_sync_events_total{result="duplicate"}`), at,
				"the restarted edge resent the batch whose answer it never got")
			e.proc.stop(t)
			c.proc.stop(t)
		})
		t.Run(string(eng)+"/central", func(t *testing.T) {
			c := newCentral(t, eng)
			e, want, total := backlog(t, c, 300)
			c.start()
			at := firstRows(t, c, total)
			c.proc.kill()
			// A batch's events, job summaries and edge counter commit in one
			// transaction: after the kill they still agree, so no batch was
			// stored in part.
			after := c.count(`SELECT COUNT(*) FROM edge_events`)
			require.Equal(t, after, c.count(`SELECT events_total FROM edges WHERE id = ?`, c.EdgeID), "a batch was stored in part")
			require.Equal(t, after, c.count(`SELECT COALESCE(SUM(events), 0) FROM edge_jobs`), "a batch was stored in part")
			t.Logf("central killed with %d of %d events stored (%d when the kill was sent)", after, total, at)
			c.start()
			c.waitEvents(total, 60*time.Second)
			checkExactlyOnce(t, c, want)
			e.proc.stop(t)
			c.proc.stop(t)
			c.noSecretLogged(e.proc, c.proc)
		})
	}
}
