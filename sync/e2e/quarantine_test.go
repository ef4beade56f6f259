package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// buggyCentral stands in front of the real central as a central with a
// bug would: while refusing, it answers every batch holding an event of
// task with central's own 400 invalid_batch, which the edge takes as a
// verdict on the item; everything else reaches central unchanged. (A
// central of the edge's own version refuses nothing the edge sends: the
// edge checks every item by the same rules first.)
type buggyCentral struct {
	URL      string
	refusing atomic.Bool
	refused  atomic.Int64
}

func newBuggyCentral(t *testing.T, target, task string) *buggyCentral {
	u, err := url.Parse(target)
	require.NoError(t, err)
	b := &buggyCentral{}
	b.refusing.Store(true)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == wire.BatchPath && b.refusing.Load() {
			gz, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(gz))
			var batch wire.Batch
			if raw, err := wire.Decompress(gz, wire.MaxBodyBytes); err == nil && json.Unmarshal(raw, &batch) == nil {
				for _, e := range batch.Events {
					if e.Task == task {
						b.refused.Add(1)
						w.Header().Set("Content-Type", "application/json")
						w.WriteHeader(http.StatusBadRequest)
						_, _ = io.WriteString(w, `{"error":{"code":"invalid_batch","message":"events[0]: task is not known"}}`)
						return
					}
				}
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	b.URL = srv.URL
	return b
}

// quarantine runs `euterpe-edge sync quarantine args…` on the edge's state
// directory, beside the running daemon, as its operator does.
func (e *edge) quarantine(args ...string) (code int, stdout, stderr string) {
	e.t.Helper()
	cmd := exec.Command(bins["euterpe-edge"], append([]string{"sync", "quarantine"}, args...)...)
	cmd.Env = append(baseEnv(), "EUTERPE_STATE_DIR="+e.state)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("euterpe-edge sync quarantine %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

type quarantined struct {
	ID     int64  `json:"id"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Events int    `json:"events"`
}

func (e *edge) quarantined() []quarantined {
	e.t.Helper()
	code, out, stderr := e.quarantine("list")
	require.Equal(e.t, 0, code, stderr)
	var qs []quarantined
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var q quarantined
		require.NoError(e.t, json.Unmarshal([]byte(l), &q), l)
		qs = append(qs, q)
	}
	return qs
}

// lastStatus is the spool as the edge's last heartbeat reported it.
func (c *central) lastSpool() wire.SpoolStatus {
	c.t.Helper()
	var raw *string
	require.NoError(c.t, c.db.QueryRow(c.db.Rebind(`SELECT last_status FROM edges WHERE id = ?`), c.EdgeID).Scan(&raw))
	if raw == nil {
		return wire.SpoolStatus{Events: -1}
	}
	var st wire.Status
	require.NoError(c.t, json.Unmarshal([]byte(*raw), &st))
	return st.Spool
}

// A central with a bug refuses one job's events: the running edge
// quarantines them one by one and ships the others. Resent while the bug
// is still there, they are refused and quarantined again, under new ids;
// the daemon's spool totals (its metrics and heartbeat) follow the
// command's changes to the file. Once central is fixed, resending them by
// id stores each once, and the job ends done on central.
func TestQuarantinedEventsResentToAFixedCentral(t *testing.T) {
	for _, eng := range sqltest.Engines {
		t.Run(string(eng), func(t *testing.T) {
			c := newCentral(t, eng)
			c.start()
			bug := newBuggyCentral(t, c.URL, "rag")
			tool := toolServer(t)
			e := newEdge(t, c, "EUTERPE_TASK_BACKENDS=tool=http:"+tool+",rag=http:"+tool, "EUTERPE_SYNC_URL="+bug.URL)
			e.start()
			good := submit(t, e, "tool", `{}`, 3)
			odd := submit(t, e, "rag", `{}`, 1)
			all := append(append([]string{}, good...), odd...)
			waitDone(t, e.rdb, all, 30*time.Second)
			want := written(t, e.rdb, all)
			oddEvents := len(want[odd[0]])
			c.waitEvents(eventCount(want)-oddEvents, 30*time.Second)

			var first []quarantined
			require.Eventually(t, func() bool { first = e.quarantined(); return len(first) == oddEvents },
				30*time.Second, 100*time.Millisecond, "each of the job's events is quarantined alone")
			for _, q := range first {
				assert.Equal(t, quarantined{ID: q.ID, Status: 400, Code: wire.CodeInvalidBatch, Events: 1}, q)
			}

			// Central is not fixed yet: the resent events come back.
			code, out, stderr := e.quarantine("resend", "--all")
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, fmt.Sprintf(`"events":%d`, oddEvents))
			var again []quarantined
			require.Eventually(t, func() bool {
				again = e.quarantined()
				return len(again) == oddEvents && again[0].ID > first[len(first)-1].ID
			}, 30*time.Second, 100*time.Millisecond, "refused again, quarantined again under new ids")
			require.Eventually(t, func() bool {
				s := c.lastSpool()
				return s.Events == 0 && s.Quarantined == int64(oddEvents)
			}, 30*time.Second, 100*time.Millisecond, "the heartbeat counts the quarantine as the file holds it")

			bug.refusing.Store(false)
			ids := make([]string, len(again))
			for i, q := range again {
				ids[i] = fmt.Sprint(q.ID)
			}
			code, out, stderr = e.quarantine(append([]string{"resend"}, ids...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, fmt.Sprintf(`"events":%d`, oddEvents))
			c.waitEvents(eventCount(want), 30*time.Second)
			checkExactlyOnce(t, c, want)
			assert.Empty(t, e.quarantined())

			code, _, stderr = e.quarantine("resend", ids[0])
			assert.Equal(t, 1, code)
			assert.Contains(t, stderr, "not in the quarantine: "+ids[0])

			require.Eventually(t, func() bool {
				s := c.lastSpool()
				return s.Events == 0 && s.Quarantined == 0
			}, 30*time.Second, 100*time.Millisecond, "neither total drifts from the file")
			assert.Equal(t, 0, e.metric("euterpe_sync_spool_events"))
			assert.Equal(t, 0, e.metric("euterpe_sync_spool_bytes"))
			assert.GreaterOrEqual(t, bug.refused.Load(), int64(2*oddEvents))
			e.proc.stop(t)
			c.proc.stop(t)
			c.noSecretLogged(e.proc, c.proc)
		})
	}
}
