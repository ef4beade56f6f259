package ship

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

func capture(job string, n int, typ, data string) jobs.Captured {
	return jobs.Captured{ID: fmt.Sprintf("%d-0", 1000+n), JobID: job, Entry: fmt.Sprintf("%d-0", 1000+n), Type: typ,
		Step: "worker." + typ, Task: "chat", TS: int64(1000 + n), Data: data}
}

// A batch is stored whole or refused whole (one transaction, one answer),
// so a gap or an event central refuses must not go out with good ones: the
// shipper sets it aside alone, and every good event and gap still arrives.
func TestOneBadItemQuarantinesOnlyItself(t *testing.T) {
	for _, tc := range []struct {
		name string
		// refuse makes the receiver answer 400 invalid_batch to any batch
		// holding this event (a rule of central's the edge does not know).
		refuse string
		// bad is a job whose id central refuses: its dropped deltas make
		// a gap no batch can carry.
		bad bool
	}{
		{name: "gap the edge can tell is invalid", bad: true},
		{name: "event central refuses", refuse: "good-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delta := `{"text":"` + strings.Repeat("d", 400) + `"}`
			budget := int64(3000)
			h := newHarness(t, budget, nil)
			ctx := context.Background()
			var caps []jobs.Captured
			n := 0
			add := func(job, typ, data string) {
				caps = append(caps, capture(job, n, typ, data))
				n++
			}
			if tc.bad { // oldest: its deltas are the first dropped
				for range 4 {
					add("bad/job", "delta", delta)
				}
			}
			first := n
			for j := range 6 {
				job := fmt.Sprintf("good-%d", j)
				add(job, "queued", `{}`)
				add(job, "delta", delta)
				add(job, "done", `{}`)
			}
			res, err := h.sh.Spool().Add(ctx, caps)
			require.NoError(t, err)
			require.Greater(t, res.Dropped, 0, "the budget dropped deltas: there are gaps")
			var refusedID string
			if tc.refuse != "" {
				c := caps[first+11] // the job's done event
				refusedID = wire.EventID("jetson-1", tc.refuse, c.Entry)
				require.Equal(t, tc.refuse, c.JobID)
				h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
					body, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(body))
					zr, err := gzip.NewReader(bytes.NewReader(body))
					if err != nil {
						return false
					}
					raw, _ := io.ReadAll(zr)
					if bytes.Contains(raw, []byte(`"`+refusedID+`"`)) {
						shiptest.Refuse(w, http.StatusBadRequest, wire.CodeInvalidBatch)
						return true
					}
					return false
				})
			}
			for i := 0; ; i++ {
				require.Less(t, i, 100, "the spool does not drain")
				r := h.sh.SendOnce(ctx)
				if r.Idle {
					break
				}
			}
			st, err := h.sh.Spool().Stats(ctx)
			require.NoError(t, err)
			assert.Zero(t, st.Events)

			got := h.rc.Events()
			var wantEvents, gapped int
			for _, c := range caps {
				id := wire.EventID("jetson-1", c.JobID, c.Entry)
				if c.JobID == "bad/job" || id == refusedID {
					assert.NotContains(t, got, id)
					continue
				}
				if c.Type != "delta" {
					assert.Contains(t, got, id, "a good %s event was set aside", c.Type)
				}
				wantEvents++
			}
			for _, g := range h.rc.Gaps() {
				assert.NotEqual(t, "bad/job", g.JobID)
				gapped += int(g.Count)
			}
			assert.Equal(t, wantEvents, len(got)+gapped, "every good event arrived or is counted in a gap")
			q, err := h.sh.Spool().QuarantineList(ctx)
			require.NoError(t, err)
			items := 0
			for _, b := range q {
				items += b.Events + b.Gaps
				assert.Equal(t, 1, b.Events+b.Gaps, "a quarantined batch holds one item: %s", b.Body)
			}
			assert.Positive(t, items)
		})
	}
}
