package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Results central could not store as the edge holds them still reach it,
// and with them every job's status. A backend's Latin-1 text is invalid
// UTF-8, which JSON lets through inside strings and Postgres text refuses:
// it arrives with U+FFFD in place of the bad bytes (once, it stopped every
// later batch with a 503 on Postgres, for good). A result over
// wire.MaxDataBytes arrives as a note of its size (once, the event was set
// aside on the edge and its job stayed "running" on central). Jobs behind
// them sync as usual, and nothing is quarantined.
func TestResultsCentralCannotStoreAsWrittenStillSync(t *testing.T) {
	results := map[string]struct{ result, stored string }{
		"latin-1":   {"{\"text\":\"caf\xe9 cr\xe8me\"}", `{"text":"caf\uFFFD cr\uFFFDme"}`},
		"oversized": {`{"text":"` + strings.Repeat("h", wire.MaxDataBytes) + `"}`, `{"truncated":true,"bytes":65547}`},
		"plain":     {`{"text":"ok"}`, `{"text":"ok"}`},
	}
	for _, eng := range sqltest.Engines {
		t.Run(string(eng), func(t *testing.T) {
			c := newCentral(t, eng)
			c.start()
			rdb, _ := testsvc.Redis(t)
			st := jobs.NewStore(rdb)
			st.Capture = jobs.CaptureStream
			ctx := context.Background()
			var ids []string
			job := map[string]string{} // case -> job id
			for _, name := range []string{"latin-1", "oversized", "plain"} {
				cr, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 600})
				require.NoError(t, err)
				_, err = st.SetRunning(ctx, cr.ID, "worker.start", nil)
				require.NoError(t, err)
				_, err = st.Finish(ctx, cr.ID, jobs.Done, "worker.finish", json.RawMessage(results[name].result), nil, "")
				require.NoError(t, err)
				ids, job[name] = append(ids, cr.ID), cr.ID
			}
			want := written(t, rdb, ids)

			sp, err := spool.Open(ctx, filepath.Join(t.TempDir(), spool.File), 64<<20)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sp.Close() })
			logs := &testsvc.LogBuffer{}
			sh, err := ship.New(slog.New(slog.NewTextHandler(logs, nil)), rdb, sp, ship.Config{
				URL: c.URL, EdgeID: c.EdgeID, Secret: []byte(c.secret), BackoffMax: time.Second})
			require.NoError(t, err)
			runCtx, cancel := context.WithCancel(ctx)
			stopped := make(chan struct{})
			go func() { defer close(stopped); _ = sh.Run(runCtx) }()
			t.Cleanup(func() { cancel(); <-stopped })

			total := 0
			for _, w := range want {
				total += len(w)
			}
			c.waitEvents(total, 30*time.Second)
			checkExactlyOnce(t, c, want) // every job "done" on central too
			for name, r := range results {
				var data string
				require.NoError(t, c.db.QueryRow(c.db.Rebind(`SELECT data FROM edge_events WHERE job_id = ? AND type = 'done'`),
					job[name]).Scan(&data))
				assert.JSONEq(t, r.stored, data, name)
			}
			assert.Zero(t, sh.Quarantined())
			assert.NotContains(t, c.proc.logs.String(), "sync request failed", "central never failed to store a batch")
			cancel()
			<-stopped
			c.proc.stop(t)
			c.noSecretLogged(c.proc)
		})
	}
}
