package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A job key that holds something other than a hash (someone SET it) is
// answered like a status the gateway does not know, 409
// job_status_unknown as cancel answers it, not 500: reading it, watching
// it or cancelling it again will not change the answer. A stream already
// open when the key goes bad ends with a stream_error event of that code.
func TestJobKeyOfWrongTypeAnswersStatusUnknown(t *testing.T) {
	testsvc.EachRedis(t, testJobKeyOfWrongTypeAnswersStatusUnknown)
}

func testJobKeyOfWrongTypeAnswersStatusUnknown(t *testing.T) {
	s := startServer(t, testSettings())
	ctx := context.Background()
	spoil := func(id string) {
		require.NoError(t, s.RDB.Del(ctx, jobs.JobKey(id)).Err())
		require.NoError(t, s.RDB.Set(ctx, jobs.JobKey(id), "not a hash", time.Minute).Err())
	}
	for _, tc := range []struct {
		name, method, path string
	}{
		{"get", http.MethodGet, ""},
		{"events", http.MethodGet, "/events"},
		{"cancel", http.MethodPost, "/cancel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newJob(t, s)
			spoil(id)
			var resp *http.Response
			var body string
			if tc.method == http.MethodPost {
				resp, body = s.post(t, "/v1/jobs/"+id+tc.path, "", nil)
			} else {
				resp, body = s.get(t, "/v1/jobs/"+id+tc.path)
			}
			assert.Equal(t, http.StatusConflict, resp.StatusCode, body)
			assert.Equal(t, "job_status_unknown", errorCode(t, body))
			assert.Equal(t, "not a hash", s.RDB.Get(ctx, jobs.JobKey(id)).Val(), "nothing written")
		})
	}

	t.Run("goes bad while followed", func(t *testing.T) {
		set := testSettings()
		set.Heartbeat = 50 * time.Millisecond
		s := startServer(t, set)
		id := newJob(t, s)
		cl := s.events(t, id, nil, "")
		for _, want := range []string{"hello", "queued"} {
			f, err := cl.next()
			require.NoError(t, err)
			require.Equal(t, want, f.Event)
		}
		require.NoError(t, s.RDB.Del(ctx, jobs.JobKey(id)).Err())
		require.NoError(t, s.RDB.Set(ctx, jobs.JobKey(id), "not a hash", time.Minute).Err())
		ended := cl.rest()
		select {
		case fs := <-ended:
			require.Len(t, fs, 1, "%v", fs)
			assert.Equal(t, "stream_error", fs[0].Event)
			var body struct {
				JobID string `json:"job_id"`
				Code  string `json:"code"`
			}
			require.NoError(t, json.Unmarshal([]byte(fs[0].Data), &body))
			assert.Equal(t, "job_status_unknown", body.Code)
			assert.Equal(t, id, body.JobID)
		case <-time.After(3 * time.Second):
			_ = cl.resp.Body.Close()
			t.Fatal("stream of the job with a bad hash key still open")
		}
	})
}
