package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/ship"
)

// An edge whose clock is two hours off still syncs to a real central: the
// first batch is refused with 401 clock_skew, the shipper sets its signing
// clock from central's Date header and every event and the heartbeat go
// through. The daemon has no clock setting, and faketime works by preloading
// a library over libc's clock calls, which a static Go binary (built with
// CGO_ENABLED=0) never makes: it reads the clock itself. So the
// shipper runs in this process with its clock seam (ship.Config.Now) on a
// capturing job store, a real spool file and a leased Redis database, and
// central is the built program.
func TestEdgeClockTwoHoursOffStillSyncs(t *testing.T) {
	for _, eng := range sqltest.Engines {
		for _, off := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
			t.Run(string(eng)+"/"+off.String(), func(t *testing.T) {
				c := newCentral(t, eng)
				c.start()
				rdb, _ := testsvc.Redis(t)
				st := capturingStore(rdb)
				ids := make([]string, 20)
				for i := range ids {
					ids[i] = finishedJob(t, st, "tool", json.RawMessage(`{"ok":true}`))
				}
				want := written(t, rdb, ids)
				_, logs, stop := c.shipTo(rdb, ship.Config{BackoffMax: time.Second, Heartbeat: time.Second,
					Now: func() time.Time { return time.Now().Add(off) }})
				c.waitEvents(eventCount(want), 30*time.Second)
				checkExactlyOnce(t, c, want)
				require.Eventually(t, func() bool {
					return c.count(`SELECT COUNT(*) FROM edges WHERE id = ? AND last_status IS NOT NULL`, c.EdgeID) == 1
				}, 10*time.Second, 20*time.Millisecond, "a heartbeat signed with the corrected clock is stored")
				assert.Contains(t, c.proc.logs.String(), "clock_skew", "central refused the skewed clock first")
				resp, err := http.Get(c.URL + "/metrics")
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.True(t, strings.Contains(string(body), `euterpe_sync_refused_total{reason="clock_skew"}`), "central counted the refusal")
				assert.NotContains(t, logs.String(), c.secret)
				stop()
				c.proc.stop(t)
				c.noSecretLogged(c.proc)
			})
		}
	}
}
