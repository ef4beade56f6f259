package ship

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// A batch that central stored but whose answer never came back (a
// proxy's 504, the client's timeout) is halved for the next attempt, and
// that half is accepted. The other half went out with the first attempt
// and may be on central too: until it is sent again, the budget must not
// drop its deltas, or central would store them and count them in a gap.
func TestUnansweredBatchStaysProtectedAfterItsHalfIsAccepted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the client's; 0 is the harness's
		answer  func(w http.ResponseWriter)
	}{
		{"proxy gateway timeout", 0, func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusGatewayTimeout)
			_, _ = w.Write([]byte("<html><head><title>504 Gateway Time-out</title></head><body>nginx</body></html>"))
		}},
		{"client timeout", time.Second, func(w http.ResponseWriter) {
			time.Sleep(2 * time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 45_000, func(c *Config) {
				if tc.timeout > 0 {
					c.Client = &http.Client{Timeout: tc.timeout}
				}
			})
			var first atomic.Bool
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
				if r.URL.Path != wire.BatchPath || !first.CompareAndSwap(false, true) {
					return false
				}
				// Central stores the batch; its answer does not reach the edge.
				h.rc.ServeHTTP(httptest.NewRecorder(), r)
				tc.answer(w)
				return true
			})
			ctx := context.Background()
			ids := h.jobs(20, 8, `{"text":"token"}`)
			_, err := h.sh.MoveOnce(ctx)
			require.NoError(t, err)
			require.Zero(t, h.sh.Spool().Dropped(), "the first jobs fit the budget")

			r := h.sh.SendOnce(ctx)
			require.Equal(t, actBackoff, r.Action, "%+v", r)
			sent := r.Events
			require.Len(t, h.rc.Events(), sent, "central stored the unanswered batch")
			if tc.timeout > 0 {
				// The timeout was for the send above; what follows is
				// answered, however long a busy machine takes over it.
				cl := *h.sh.cfg.Client
				cl.Timeout = time.Minute
				h.sh.cfg.Client = &cl
			}
			r = h.sh.SendOnce(ctx)
			require.Equal(t, actAccepted, r.Action, "%+v", r)
			require.Equal(t, sent/2, r.Events, "the batch after the unanswered one is half as large")

			// More jobs push the spool over its budget.
			ids = append(ids, h.jobs(20, 8, `{"text":"token"}`)...)
			want := h.written(ids)
			h.drain()
			require.Positive(t, h.sh.Spool().Dropped(), "the budget dropped deltas")

			got := h.rc.Events()
			gapped := map[string]int64{}
			for _, g := range h.rc.Gaps() {
				gapped[g.JobID] += g.Count
				for _, e := range got {
					if e.JobID == g.JobID && !entryAfter(e.EntryID, g.LastEntryID) && !entryAfter(g.FirstEntryID, e.EntryID) {
						t.Errorf("gap %s counts event %s, which central stored", g.GapID, e.EventID)
					}
				}
			}
			stored := map[string]int64{}
			for _, e := range got {
				stored[e.JobID]++
			}
			for _, id := range ids {
				var written int64
				for _, e := range want {
					if e.JobID == id {
						written++
					}
				}
				assert.Equal(t, written, stored[id]+gapped[id], "job %s: events stored plus gaps counted = events written", id)
			}
		})
	}
}

// entryAfter reports whether stream id a comes after b.
func entryAfter(a, b string) bool {
	var am, as, bm, bs int64
	_, _ = fmt.Sscanf(a, "%d-%d", &am, &as)
	_, _ = fmt.Sscanf(b, "%d-%d", &bm, &bs)
	return am > bm || (am == bm && as > bs)
}
