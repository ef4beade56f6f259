package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// POST /v1/jobs without ttl_s gives the job EUTERPE_JOB_TTL_S: the hash's
// ttl_s field and the TTL of job:{id}, job:{id}:events and the idempotency
// record; a ttl_s in the body is used as given. The queue entry carries
// job_id, task and the payload as a JSON string.
func TestCreateTTLAndQueueEntry(t *testing.T) { testsvc.EachRedis(t, testCreateTTLAndQueueEntry) }

func testCreateTTLAndQueueEntry(t *testing.T) {
	set := testSettings()
	set.JobTTL = 300
	tests := []struct {
		name    string
		body    string
		wantTTL int
	}{
		{"ttl_s omitted", `{"task":"rag","payload":{"q": "a", "k": [1, 2]}}`, 300},
		{"ttl_s null", `{"task":"rag","payload":{"q": "a", "k": [1, 2]},"ttl_s":null}`, 300},
		{"ttl_s given", `{"task":"rag","payload":{"q": "a", "k": [1, 2]},"ttl_s":90}`, 90},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, set)
			ctx := context.Background()
			const key = "order-1"
			resp, body := s.post(t, "/v1/jobs", tc.body, map[string]string{"Idempotency-Key": key})
			require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
			var cr struct {
				JobID string `json:"job_id"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &cr))
			id := cr.JobID

			assert.Equal(t, strconv.Itoa(tc.wantTTL), s.RDB.HGet(ctx, jobs.JobKey(id), "ttl_s").Val())
			for _, k := range []string{jobs.JobKey(id), jobs.EventsKey(id), jobs.IdempotencyKey(key)} {
				ttl := s.RDB.TTL(ctx, k).Val()
				assert.InDelta(t, tc.wantTTL, ttl.Seconds(), 2, "TTL of %s", k)
			}
			q := s.RDB.XRange(ctx, jobs.QueueStream, "-", "+").Val()
			require.Len(t, q, 1)
			assert.Equal(t, map[string]any{"job_id": id, "task": "rag", "payload": `{"q":"a","k":[1,2]}`}, q[0].Values)

			resp, body = s.get(t, "/v1/jobs/"+id)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			var j map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &j))
			assert.EqualValues(t, tc.wantTTL, j["ttl_s"])
		})
	}
}

// A terminal event that comes live, while the stream follows a running
// job, is sent and ends the stream, for each of the contract's terminal
// types. The heartbeat is far off, so nothing but the event can end it.
func TestSSELiveTerminalEventEndsStream(t *testing.T) {
	testsvc.EachRedis(t, testSSELiveTerminalEventEndsStream)
}

func testSSELiveTerminalEventEndsStream(t *testing.T) {
	set := testSettings()
	set.Heartbeat = time.Minute
	ctx := context.Background()
	tests := []struct {
		terminal string
		write    func(s *server, id string) (string, error)
	}{
		{jobs.Done, func(s *server, id string) (string, error) {
			return s.Store.Finish(ctx, id, jobs.Done, "worker.finish", json.RawMessage(`{"text":"ok"}`), nil, "")
		}},
		{jobs.Error, func(s *server, id string) (string, error) {
			return s.Store.Finish(ctx, id, jobs.Error, "worker.finish", nil, json.RawMessage(`{"code":"backend_error"}`), "")
		}},
		{jobs.Canceled, func(s *server, id string) (string, error) {
			return s.Store.Cancel(ctx, id, "gateway.cancel", "client")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.terminal, func(t *testing.T) {
			s := startServer(t, set)
			id := newJob(t, s)
			_, err := s.Store.SetRunning(ctx, id, "worker.start", nil)
			require.NoError(t, err)
			c := s.events(t, id, nil, "")
			for _, want := range []string{"hello", "queued", "running"} {
				f, err := c.next()
				require.NoError(t, err)
				require.Equal(t, want, f.Event)
			}
			last, err := tc.write(s, id)
			require.NoError(t, err)
			select {
			case rest := <-c.rest():
				assert.Equal(t, []string{tc.terminal + "@" + last}, ids(rest))
			case <-time.After(20 * time.Second):
				_ = c.resp.Body.Close()
				t.Fatal("stream still open after its terminal event")
			}
		})
	}
}
