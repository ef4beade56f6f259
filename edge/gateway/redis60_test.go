package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// Every command the gateway sends, on its shared pool and on the SSE
// reader's connection, exists in Redis 6.0 (JetPack's Redis). The backlog
// check is run on both of its paths: the Redis 7 one (group lag, chosen
// after INFO server names a version ≥ 7) and the forced 6.0 one (XRANGE
// after the group's last delivered id).
func TestGatewayCommandsRunOnRedis60(t *testing.T) {
	testsvc.EachRedis(t, testGatewayCommandsRunOnRedis60)
}

func testGatewayCommandsRunOnRedis60(t *testing.T) {
	for _, force60 := range []bool{false, true} {
		name := "backlog by lag"
		if force60 {
			name = "backlog by range (6.0 path)"
		}
		t.Run(name, func(t *testing.T) {
			cmds := testsvc.NewCommandLog()
			set := testSettings()
			set.BacklogLimit = 3
			s := startRecordedServer(t, set, cmds)
			if force60 {
				s.Store.ForceRange()
			}
			ctx := context.Background()

			// Create (with and without an idempotency key, plus a replay).
			key := map[string]string{"Idempotency-Key": "compat-key-1"}
			resp, body := s.post(t, "/v1/jobs", `{"task":"chat","payload":{"q":1}}`, key)
			require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
			var created struct {
				JobID string `json:"job_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &created))
			id := created.JobID
			resp, _ = s.post(t, "/v1/jobs", `{"task":"chat","payload":{"q":1}}`, key)
			require.Equal(t, http.StatusAccepted, resp.StatusCode)

			// Get, including an unknown job.
			resp, _ = s.get(t, "/v1/jobs/"+id)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			resp, _ = s.get(t, "/v1/jobs/00000000-0000-4000-8000-000000000000")
			require.Equal(t, http.StatusNotFound, resp.StatusCode)

			// SSE: one watcher, a second joining later (interrupting the
			// reader's blocking XREAD), a resume by Last-Event-ID.
			first := s.events(t, id, nil, "")
			hello, err := first.next()
			require.NoError(t, err)
			require.Equal(t, "hello", hello.Event)
			queued, err := first.next()
			require.NoError(t, err)
			_, err = s.Store.SetRunning(ctx, id, "worker.start", nil)
			require.NoError(t, err)
			progress(t, s, id, 1)
			other := newJob(t, s)
			second := s.events(t, other, nil, "")
			resumed := s.events(t, id, map[string]string{"Last-Event-ID": queued.ID}, "")

			// Cancel (script + PUBLISH), then a refused second cancel.
			resp, body = s.post(t, "/v1/jobs/"+id+"/cancel", "", nil)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			resp, _ = s.post(t, "/v1/jobs/"+id+"/cancel", "", nil)
			require.Equal(t, http.StatusConflict, resp.StatusCode)
			for _, c := range []*sseClient{first, resumed} {
				fs := c.all(t)
				require.NotEmpty(t, fs)
				assert.Equal(t, "canceled", fs[len(fs)-1].Event)
			}
			_, err = s.Store.Cancel(ctx, other, "test", "done")
			require.NoError(t, err)
			assert.Equal(t, "canceled", second.all(t)[2].Event)

			// Backpressure: with no worker every job stays queued, so the
			// backlog limit (3) is reached and measured on this path.
			full := false
			for range 5 {
				resp, _ := s.post(t, "/v1/jobs", `{"task":"chat","payload":{}}`, nil)
				if resp.StatusCode == http.StatusTooManyRequests {
					full = true
					break
				}
				require.Equal(t, http.StatusAccepted, resp.StatusCode)
			}
			assert.True(t, full, "backlog limit never reached")

			s.Stop()
			t.Logf("commands sent: %v", cmds.Names())
			cmds.CheckRedis60(t)
			for _, want := range []string{"EVALSHA", "HGETALL", "XREAD", "XINFO GROUPS", "CLIENT UNBLOCK", "XGROUP CREATE"} {
				assert.True(t, cmds.Sent(want), "flow did not send %s", want)
			}
			if force60 {
				assert.True(t, cmds.Sent("XRANGE"), "the 6.0 backlog path counts with XRANGE")
				assert.False(t, cmds.Sent("INFO"), "the forced 6.0 path needs no version check")
			} else {
				assert.True(t, cmds.Sent("INFO"), "lag is used only after INFO server names Redis ≥ 7")
				if testsvc.IsRedis60(t) {
					assert.True(t, cmds.Sent("XRANGE"), "a real Redis 6.0 is detected and counted with XRANGE")
				}
			}
		})
	}
}
