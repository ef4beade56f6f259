package ship

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// olderBatch is a batch as a central from before events carried their
// task decodes it.
type olderBatch struct {
	EdgeID string `json:"edge_id"`
	SentAt string `json:"sent_at"`
	Events []struct {
		EventID string          `json:"event_id"`
		EdgeID  string          `json:"edge_id"`
		JobID   string          `json:"job_id"`
		EntryID string          `json:"entry_id"`
		Type    string          `json:"type"`
		Step    string          `json:"step"`
		TS      int64           `json:"ts"`
		Data    json.RawMessage `json:"data"`
	} `json:"events"`
	Dropped []wire.Gap `json:"dropped,omitempty"`
}

// asOlderBatchCentral makes rc refuse batches as a central older than the
// edge's format does: 400 unsupported_format for a field it does not know.
func asOlderBatchCentral(rc *shiptest.Receiver, refused *int) {
	rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
		if r.URL.Path != wire.BatchPath {
			return false
		}
		gz, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(gz))
		raw, err := wire.Decompress(gz, wire.MaxBodyBytes)
		if err != nil {
			return false
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&olderBatch{}); err != nil {
			*refused++
			shiptest.Refuse(w, http.StatusBadRequest, wire.CodeUnsupportedFormat)
			return true
		}
		return false
	})
}

// A central older than the edge's format refuses every batch for a field
// it does not know, which says nothing against the events: the batch is
// neither split nor set aside, the sender backs off and says so once, and
// once central is upgraded the whole backlog goes through.
func TestOlderCentralFormatKeepsTheBacklog(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, 64<<20, nil)
	var refused int
	asOlderBatchCentral(h.rc, &refused)
	want := h.written(h.jobs(3, 1, `{}`))
	h.moveAll()
	const tries = 4
	for i := range tries {
		r := h.sh.SendOnce(ctx)
		require.Equal(t, actUnsupported, r.Action, "try %d: %v", i, r.Err)
		assert.Equal(t, wire.CodeUnsupportedFormat, r.Code)
		assert.ErrorIs(t, r.Err, ErrUnsupportedFormat)
		assert.Equal(t, len(want), r.Events, "try %d: sent whole, not split", i)
		assert.Positive(t, r.Wait, "try %d: backs off", i)
	}
	assert.Equal(t, tries, refused)
	assert.Equal(t, tries, h.sh.state.failures)
	assert.Zero(t, h.sh.Quarantined())
	q, err := h.sh.Spool().QuarantineList(ctx)
	require.NoError(t, err)
	assert.Empty(t, q)
	st, err := h.sh.Spool().Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(len(want)), st.Events, "every event stays spooled")
	assert.Equal(t, 1, strings.Count(h.logs.String(), "central is older than this edge"), "said once")

	h.rc.SetHook(nil) // central upgraded
	h.drain()
	got := h.rc.Events()
	for id := range want {
		assert.Contains(t, got, id)
	}
	assert.Zero(t, h.sh.Quarantined())
}
