package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// toolServer is an http backend that answers at once (the backend contract:
// payload JSON in, result JSON out).
func toolServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// llmServer streams tokens in the OpenAI-compatible wire format, so the
// edge's llm backend writes one delta event per token (with
// EUTERPE_DELTA_BYTES=1).
func llmServer(t *testing.T, tokens int, tokenBytes int) string {
	tok := strings.Repeat("x", tokenBytes)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < tokens; i++ {
			b, _ := json.Marshal(map[string]any{"model": "m1", "choices": []any{map[string]any{"index": 0,
				"delta": map[string]string{"content": tok}, "finish_reason": nil}}})
			fmt.Fprintf(w, "data: %s\n\n", b)
			fl.Flush()
			time.Sleep(time.Millisecond) // one token per read, so one delta each
		}
		fmt.Fprint(w, `data: {"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// submit posts n jobs of task to the edge's gateway.
func submit(t *testing.T, e *edge, task string, payload string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range ids {
		resp, err := client.Post(e.URL+"/v1/jobs", "application/json",
			strings.NewReader(fmt.Sprintf(`{"task":%q,"payload":%s}`, task, payload)))
		require.NoError(t, err)
		var cr struct {
			JobID string `json:"job_id"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&cr))
		resp.Body.Close()
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		ids[i] = cr.JobID
	}
	return ids
}

// waitDone waits until every job's hash says done.
func waitDone(t *testing.T, rdb *redis.Client, ids []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.StringCmd, len(ids))
		for i, id := range ids {
			cmds[i] = pipe.HGet(context.Background(), jobs.JobKey(id), "status")
		}
		_, _ = pipe.Exec(context.Background())
		left := 0
		for i, c := range cmds {
			if c.Val() != string(jobs.Done) {
				left++
				if jobs.IsTerminal(c.Val()) {
					t.Fatalf("job %s ended %s", ids[i], c.Val())
				}
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs not done after %s", left, len(ids), within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// event is one event as written on the edge or stored on central.
type event struct {
	Entry string
	Type  string
	TS    int64
}

// written reads every job's event stream on the edge's Redis: what the
// edge's scripts wrote, in entry order.
func written(t *testing.T, rdb *redis.Client, ids []string) map[string][]event {
	t.Helper()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XRange(context.Background(), jobs.EventsKey(id), "-", "+")
	}
	_, err := pipe.Exec(context.Background())
	require.NoError(t, err)
	out := map[string][]event{}
	for i, c := range cmds {
		for _, m := range c.Val() {
			e := jobs.EventFromValues(m.ID, m.Values)
			out[ids[i]] = append(out[ids[i]], event{Entry: m.ID, Type: e.Type, TS: e.TS})
		}
	}
	return out
}

// stored reads central's edge_events per job in seq order (the order in
// which central stored them).
func (c *central) stored() map[string][]event {
	c.t.Helper()
	rows, err := c.db.Query(c.db.Rebind(`SELECT job_id, entry_id, type, ts FROM edge_events WHERE edge_id = ? ORDER BY seq`), c.EdgeID)
	require.NoError(c.t, err)
	defer rows.Close()
	out := map[string][]event{}
	for rows.Next() {
		var job string
		var e event
		require.NoError(c.t, rows.Scan(&job, &e.Entry, &e.Type, &e.TS))
		out[job] = append(out[job], e)
	}
	require.NoError(c.t, rows.Err())
	return out
}

// waitEvents waits until central holds n events of the edge.
func (c *central) waitEvents(n int, within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := c.count(`SELECT COUNT(*) FROM edge_events WHERE edge_id = ?`, c.EdgeID)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("central has %d of %d events after %s", got, n, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// entryLess orders stream entry ids ("ms-seq") numerically.
func entryLess(a, b string) bool {
	var am, as, bm, bs int64
	fmt.Sscanf(strings.Replace(a, "-", " ", 1), "%d %d", &am, &as)
	fmt.Sscanf(strings.Replace(b, "-", " ", 1), "%d %d", &bm, &bs)
	return am < bm || (am == bm && as < bs)
}

// checkExactlyOnce compares central's rows with what the edge wrote: the
// same events per job, each once, and per job the stored (seq) order is the
// entry order and the ts order. Every job is done in edge_jobs, and the
// edge's lifetime counter matches the rows.
func checkExactlyOnce(t *testing.T, c *central, want map[string][]event) {
	t.Helper()
	got := c.stored()
	total := 0
	for job, w := range want {
		total += len(w)
		g := got[job]
		require.Len(t, g, len(w), "job %s: stored %d events, the edge wrote %d", job, len(g), len(w))
		// The sender ships in capture order, so central's seq order is the
		// entry order, which is the order of the edge's ts.
		assert.True(t, sort.SliceIsSorted(g, func(i, j int) bool { return entryLess(g[i].Entry, g[j].Entry) }), "job %s: seq order is not entry order", job)
		for i := range g {
			require.Equal(t, w[i], g[i], "job %s event %d", job, i)
			if i > 0 {
				require.LessOrEqual(t, g[i-1].TS, g[i].TS, "job %s: ts goes back at event %d", job, i)
			}
		}
	}
	require.Len(t, got, len(want), "central has events of jobs the edge never ran")
	assert.Equal(t, total, c.count(`SELECT COUNT(*) FROM edge_events`))
	assert.Equal(t, total, c.count(`SELECT COUNT(DISTINCT event_id) FROM edge_events`))
	assert.Equal(t, total, c.count(`SELECT events_total FROM edges WHERE id = ?`, c.EdgeID))
	assert.Equal(t, len(want), c.count(`SELECT COUNT(*) FROM edge_jobs WHERE edge_id = ? AND status = 'done'`, c.EdgeID))
	assert.Equal(t, len(want), c.count(`SELECT COUNT(*) FROM edge_jobs WHERE edge_id = ?`, c.EdgeID))
}
