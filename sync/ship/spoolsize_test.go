package ship

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// A job's result over wire.MaxDataBytes is spooled as the note of its
// size it is sent as, so its terminal event, which the budget never drops,
// costs the spool what it sends and no more; what central receives is
// what the spool held.
func TestLargeResultIsSpooledAsSent(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, 64<<20, nil)
	c, err := h.store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 600})
	require.NoError(t, err)
	_, err = h.store.SetRunning(ctx, c.ID, "worker.start", nil)
	require.NoError(t, err)
	result := `{"text":"` + strings.Repeat("r", 3*wire.MaxDataBytes) + `"}`
	_, err = h.store.Finish(ctx, c.ID, jobs.Done, "worker.finish", json.RawMessage(result), nil, "")
	require.NoError(t, err)
	h.moveAll()

	st, err := h.sh.Spool().Stats(ctx)
	require.NoError(t, err)
	assert.Less(t, st.Bytes, int64(wire.MaxDataBytes), "the result is counted as the note it is sent as")
	p, err := h.sh.Spool().Next(ctx, 100, 100, 1<<30)
	require.NoError(t, err)
	stored := map[string]string{}
	for _, r := range p.Rows {
		stored[wire.EventID("jetson-1", r.JobID, r.Entry)] = r.Data
	}
	h.drain()
	got := h.rc.Events()
	require.Len(t, got, len(stored))
	for id, data := range stored {
		require.Contains(t, got, id)
		// Compared as a condition: a failure prints the sizes, not megabytes.
		assert.True(t, data == string(got[id].Data), "%s is sent as stored: %d bytes, stored %d", id, len(got[id].Data), len(data))
		if got[id].Type == "done" {
			assert.JSONEq(t, fmt.Sprintf(`{"truncated":true,"bytes":%d}`, len(result)), data)
		}
	}
}

// Events the budget may not drop take the spool over its budget while
// central is out of reach; /metrics shows by how much, not only one log
// line.
func TestSpoolOverBudgetIsAMetric(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, 2048, nil)
	h.jobs(10, 0, `{}`)
	h.moveAll()
	st, err := h.sh.Spool().Stats(ctx)
	require.NoError(t, err)
	require.Greater(t, st.Bytes, int64(2048))
	assert.Equal(t, st.Bytes-2048, st.OverBudget)

	over := -1.0
	for _, c := range h.sh.Collectors() {
		if m, ok := c.(prometheus.Metric); ok && strings.Contains(m.Desc().String(), `"euterpe_sync_spool_over_budget_bytes"`) {
			var v dto.Metric
			require.NoError(t, m.Write(&v))
			over = v.GetGauge().GetValue()
		}
	}
	assert.Equal(t, float64(st.OverBudget), over)
	h.drain()
	st, err = h.sh.Spool().Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.OverBudget, "back within the budget once central took them")
}
