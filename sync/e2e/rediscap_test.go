package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship"
)

// Deltas the capture stream's cap kept out of Redis reach central as
// gaps it accepts: with every lifecycle and terminal event, the stored
// deltas and the gaps' counts account for every delta written, per job, in
// edge_gaps, edge_jobs.dropped and edges.dropped_total. One job's drops
// enclose a captured `running` event and span a step back of the edge's
// clock (a gap whose times were out of order was refused and set aside on
// the edge, and central never heard of the hole). A gap sent again (a
// mover that died before Redis heard the spool had it) is counted once.
// The edge's heartbeat carries the count of drops, which central shows.
func TestRedisCapDropsReachCentralAsGaps(t *testing.T) {
	for _, eng := range sqltest.Engines {
		t.Run(string(eng), func(t *testing.T) {
			c := newCentral(t, eng)
			c.start()
			rdb, _ := testsvc.Redis(t)
			ctx := context.Background()
			st := capturingStore(rdb)
			st.CaptureMax = 6
			now := time.Now()
			st.Now = func() time.Time { return now }
			delta := func(id string) {
				_, err := st.AppendEvent(ctx, id, "delta", "worker.delta", json.RawMessage(`{"text":"t"}`))
				require.NoError(t, err)
			}
			newJob := func() string {
				cr, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 600})
				require.NoError(t, err)
				_, err = st.SetRunning(ctx, cr.ID, "worker.start", nil)
				require.NoError(t, err)
				return cr.ID
			}
			finish := func(id string) {
				_, err := st.Finish(ctx, id, jobs.Done, "worker.finish", json.RawMessage(`{"text":"ok"}`), nil, "")
				require.NoError(t, err)
			}
			a := newJob()
			for range 6 { // 4 captured: the stream is at its cap
				delta(a)
			}
			now = now.Add(-2 * time.Second) // the clock steps back
			delta(a)
			_, err := st.SetRunning(ctx, a, "worker.restart", nil) // captured, inside a's gap
			require.NoError(t, err)
			delta(a)
			finish(a)
			b := newJob()
			delta(b)
			delta(b)
			finish(b)
			ids := []string{a, b}
			want := written(t, rdb, ids)
			drops, err := rdb.HGetAll(ctx, jobs.CaptureDrops).Result()
			require.NoError(t, err)
			require.Len(t, drops, 2)

			sh, _, stop := c.shipTo(rdb, ship.Config{BackoffMax: time.Second, Heartbeat: 200 * time.Millisecond})
			check := func() {
				t.Helper()
				got := c.stored()
				total := 0
				for _, id := range ids {
					stored := map[string]bool{}
					for _, e := range got[id] {
						stored[e.Entry] = true
					}
					missing := 0
					for _, e := range want[id] {
						switch {
						case stored[e.Entry]:
						case e.Type != "delta":
							t.Fatalf("job %s: %s event %s was lost", id, e.Type, e.Entry)
						default:
							missing++
						}
					}
					require.Positive(t, missing, "job %s lost no delta", id)
					total += missing
					assert.Equal(t, missing, c.count(`SELECT COALESCE(SUM(count), 0) FROM edge_gaps WHERE job_id = ?`, id), "job %s: gaps", id)
					assert.Equal(t, missing, c.count(`SELECT dropped FROM edge_jobs WHERE job_id = ?`, id), "job %s: dropped", id)
					assert.Equal(t, 1, c.count(`SELECT COUNT(*) FROM edge_jobs WHERE job_id = ? AND status = 'done'`, id), "job %s: done", id)
				}
				assert.Equal(t, total, c.count(`SELECT dropped_total FROM edges WHERE id = ?`, c.EdgeID))
				assert.Zero(t, c.count(`SELECT COUNT(*) FROM edge_gaps WHERE last_ts < first_ts`))
				assert.Zero(t, sh.Quarantined(), "the edge set an item aside")
			}
			n := 0
			for _, w := range want {
				n += len(w)
			}
			require.Eventually(t, func() bool {
				return c.count(`SELECT COUNT(*) FROM edge_events`)+c.count(`SELECT dropped_total FROM edges WHERE id = ?`, c.EdgeID) == n
			}, 30*time.Second, 20*time.Millisecond, "every event is stored or accounted for by a gap")
			require.Eventually(t, func() bool { return sh.GapsSent() == 2 }, 10*time.Second, 10*time.Millisecond)
			check()
			// The heartbeat reports the cap's count too, and central shows it.
			total := c.count(`SELECT dropped_total FROM edges WHERE id = ?`, c.EdgeID)
			require.Eventually(t, func() bool {
				req, _ := http.NewRequest(http.MethodGet, c.URL+"/v1/edges/"+c.EdgeID, nil)
				req.Header.Set("Authorization", "Bearer "+c.Token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				var edge struct {
					Status struct {
						RedisDropped int `json:"redis_dropped"`
					} `json:"status"`
				}
				return json.NewDecoder(resp.Body).Decode(&edge) == nil && edge.Status.RedisDropped == total
			}, 10*time.Second, 50*time.Millisecond, "central shows the heartbeat's redis_dropped")

			// The same drops taken again: sent again under their gap ids.
			require.NoError(t, rdb.HSet(ctx, jobs.CaptureDropsTaken, drops).Err())
			require.Eventually(t, func() bool { return sh.GapsSent() == 4 }, 10*time.Second, 10*time.Millisecond)
			check()
			assert.Equal(t, 2, c.count(`SELECT COUNT(*) FROM edge_gaps`))
			stop()
			c.proc.stop(t)
			c.noSecretLogged(c.proc)
		})
	}
}
