package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/ship"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Results central could not store as the edge holds them still reach it,
// and with them every job's status. A backend's Latin-1 text is invalid
// UTF-8, which JSON lets through inside strings and Postgres text refuses:
// it arrives with U+FFFD in place of the bad bytes (once, it stopped every
// later batch with a 503 on Postgres, for good). A result over
// wire.MaxDataBytes arrives as a note of its size (once, the event was set
// aside on the edge and its job stayed "running" on central). Markup
// arrives as written. Jobs behind
// them sync as usual, and nothing is quarantined.
func TestResultsCentralCannotStoreAsWrittenStillSync(t *testing.T) {
	results := map[string]struct{ result, stored string }{
		"latin-1":   {"{\"text\":\"caf\xe9 cr\xe8me\"}", `{"text":"caf\uFFFD cr\uFFFDme"}`},
		"oversized": {`{"text":"` + strings.Repeat("h", wire.MaxDataBytes) + `"}`, `{"truncated":true,"bytes":65547}`},
		"plain":     {`{"text":"ok"}`, `{"text":"ok"}`},
		// Within wire.MaxDataBytes as written, and sent as written: HTML
		// escaping by the encoder (\u003c for <) once took it past the
		// cap on the way, and central refused, for good, the whole batch.
		"markup": {`{"text":"` + strings.Repeat("<p>a &amp; b</p>", wire.MaxDataBytes/20) + `"}`,
			`{"text":"` + strings.Repeat("<p>a &amp; b</p>", wire.MaxDataBytes/20) + `"}`},
	}
	for _, eng := range sqltest.Engines {
		t.Run(string(eng), func(t *testing.T) {
			c := newCentral(t, eng)
			c.start()
			rdb, _ := testsvc.Redis(t)
			st := capturingStore(rdb)
			var ids []string
			job := map[string]string{} // case -> job id
			for _, name := range []string{"latin-1", "oversized", "markup", "plain"} {
				id := finishedJob(t, st, "chat", json.RawMessage(results[name].result))
				ids, job[name] = append(ids, id), id
			}
			want := written(t, rdb, ids)
			sh, _, stop := c.shipTo(rdb, ship.Config{BackoffMax: time.Second})
			c.waitEvents(eventCount(want), 30*time.Second)
			checkExactlyOnce(t, c, want) // every job "done" on central too
			for name, r := range results {
				var data string
				require.NoError(t, c.db.QueryRow(c.db.Rebind(`SELECT data FROM edge_events WHERE job_id = ? AND type = 'done'`),
					job[name]).Scan(&data))
				assert.JSONEq(t, r.stored, data, name)
			}
			assert.Zero(t, sh.Quarantined())
			assert.NotContains(t, c.proc.logs.String(), "sync request failed", "central never failed to store a batch")
			stop()
			c.proc.stop(t)
			c.noSecretLogged(c.proc)
		})
	}
}
