package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// metric reads one unlabelled series from the edge's /metrics.
func (e *edge) metric(name string) int { return scrape(e.t, e.URL, name) }

// scrape reads one series (name with its labels, as exposed) from base's
// /metrics; a series not exposed fails the test.
func scrape(t *testing.T, base, series string) int {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return int(f)
		}
	}
	t.Fatalf("%s/metrics has no %s", base, series)
	return 0
}

// operatorGet decodes one operator API answer.
func (c *central) operatorGet(path string, out any) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, http.StatusOK, resp.StatusCode, path)
	require.NoError(c.t, json.NewDecoder(resp.Body).Decode(out))
}

type apiGap struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

// A spool of 1 MB fills while central is down and jobs stream large
// deltas: only deltas are dropped, and central records the gaps
// (edge_gaps, the job's events in the operator API, edges.dropped_total),
// which with the stored deltas account for every delta the edge wrote. Each
// done event carries the job's whole text, so the undroppable events alone
// outgrow the budget: the spool keeps them rather than lose them, and drops
// every delta that is not in the batch in flight.
func TestFullSpoolDropsOnlyDeltasAndCentralRecordsTheGap(t *testing.T) {
	for _, eng := range sqltest.Engines {
		t.Run(string(eng), func(t *testing.T) {
			c := newCentral(t, eng)
			e := newEdge(t, c, "EUTERPE_TASK_BACKENDS=chat=llm", "EUTERPE_LLM_BASE_URL="+llmServer(t, 40, 500),
				"EUTERPE_DELTA_BYTES=1", "EUTERPE_SYNC_SPOOL_MAX_MB=1")
			e.start()
			ids := submit(t, e, "chat", `{"prompt":"x"}`, 60)
			waitDone(t, e.rdb, ids, 90*time.Second)
			want := written(t, e.rdb, ids)
			require.Eventually(t, func() bool { return e.rdb.XLen(context.Background(), jobs.CaptureStream).Val() == 0 },
				30*time.Second, 20*time.Millisecond, "the mover spools everything")
			dropped := e.metric("euterpe_sync_dropped_events_total")
			require.Positive(t, dropped, "the spool never filled")
			total, deltas := 0, 0
			for _, w := range want {
				for _, ev := range w {
					total++
					if ev.Type == "delta" {
						deltas++
					}
				}
			}
			t.Logf("%d events written (%d deltas); the full spool dropped %d", total, deltas, dropped)

			c.start()
			require.Eventually(t, func() bool {
				return c.count(`SELECT COUNT(*) FROM edge_events`)+c.count(`SELECT dropped_total FROM edges WHERE id = ?`, c.EdgeID) == total
			}, 60*time.Second, 50*time.Millisecond, "every event is stored or accounted for by a gap")

			assert.Equal(t, dropped, c.count(`SELECT dropped_total FROM edges WHERE id = ?`, c.EdgeID))
			assert.Equal(t, dropped, c.count(`SELECT COALESCE(SUM(count), 0) FROM edge_gaps WHERE edge_id = ?`, c.EdgeID))
			assert.Zero(t, c.count(`SELECT COUNT(*) FROM edge_gaps WHERE type <> 'delta'`), "only deltas are dropped")
			assert.Equal(t, len(ids), c.count(`SELECT COUNT(*) FROM edge_jobs WHERE status = 'done'`))
			got := c.stored()
			gapped := ""
			for _, id := range ids {
				var stored = map[string]event{}
				for _, ev := range got[id] {
					stored[ev.Entry] = ev
				}
				missing := 0
				for _, ev := range want[id] {
					s, ok := stored[ev.Entry]
					switch {
					case ok:
						assert.Equal(t, ev, s)
					case ev.Type != "delta":
						t.Fatalf("job %s: %s event %s was lost", id, ev.Type, ev.Entry)
					default:
						missing++
					}
				}
				require.Len(t, got[id], len(want[id])-missing, "job %s: an event central got that the edge never wrote", id)
				gaps := c.count(`SELECT COALESCE(SUM(count), 0) FROM edge_gaps WHERE job_id = ?`, id)
				require.Equal(t, missing, gaps, "job %s: the gaps count the missing deltas", id)
				require.Equal(t, missing, c.count(`SELECT dropped FROM edge_jobs WHERE job_id = ?`, id))
				if missing > 0 && gapped == "" {
					gapped = id
				}
			}
			require.NotEmpty(t, gapped)

			// The operator API shows the gap with the job's events.
			var je struct {
				Events []struct {
					Type string `json:"type"`
				} `json:"events"`
				Gaps []apiGap `json:"gaps"`
			}
			c.operatorGet("/v1/edges/"+c.EdgeID+"/jobs/"+gapped+"/events", &je)
			require.NotEmpty(t, je.Gaps)
			sum := 0
			for _, g := range je.Gaps {
				assert.Equal(t, "delta", g.Type)
				sum += g.Count
			}
			assert.Equal(t, c.count(`SELECT dropped FROM edge_jobs WHERE job_id = ?`, gapped), sum)
			assert.Equal(t, len(got[gapped]), len(je.Events))
			var eg struct {
				DroppedTotal int `json:"dropped_total"`
			}
			c.operatorGet("/v1/edges/"+c.EdgeID, &eg)
			assert.Equal(t, dropped, eg.DroppedTotal)
			e.proc.stop(t)
			c.proc.stop(t)
			c.noSecretLogged(e.proc, c.proc)
		})
	}
}
