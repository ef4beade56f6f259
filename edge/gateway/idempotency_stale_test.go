package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// An Idempotency-Key record outlives its job only when the job was deleted
// (or another gateway gave the record a longer life): the job it names can
// no longer be given back, so the key is free again, as it is once record
// and job expire together. A retry then gets a new job under the key, the
// same one for concurrent retries, never 202 for a job that answers 404.
func TestIdempotencyKeyOfVanishedJob(t *testing.T) {
	testsvc.EachRedis(t, testIdempotencyKeyOfVanishedJob)
}

func testIdempotencyKeyOfVanishedJob(t *testing.T) {
	s := startServer(t, testSettings())
	ctx := context.Background()
	body := `{"task":"chat","payload":{"q":"a"}}`
	post := func(key, body string) (int, string, string) {
		resp, b := s.post(t, "/v1/jobs", body, map[string]string{"Idempotency-Key": key})
		var cr struct {
			JobID  string `json:"job_id"`
			Status string `json:"status"`
		}
		_ = json.Unmarshal([]byte(b), &cr)
		return resp.StatusCode, cr.JobID, cr.Status
	}
	vanish := func(id string) {
		require.NoError(t, s.RDB.Del(ctx, jobs.JobKey(id), jobs.EventsKey(id)).Err())
	}

	code, first, _ := post("k", body)
	require.Equal(t, http.StatusAccepted, code)
	vanish(first)

	code, second, status := post("k", body)
	require.Equal(t, http.StatusAccepted, code)
	assert.NotEqual(t, first, second, "a new job")
	assert.Equal(t, "queued", status)
	resp, _ := s.get(t, "/v1/jobs/"+second)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the job answered is there")
	assert.Equal(t, second, s.RDB.Get(ctx, jobs.IdempotencyKey("k")).Val())
	code, again, _ := post("k", body)
	assert.Equal(t, http.StatusAccepted, code)
	assert.Equal(t, second, again, "the key now names the new job")
	code, _, _ = post("k", `{"task":"chat","payload":{"q":"b"}}`)
	assert.Equal(t, http.StatusConflict, code, "and holds the new request's fingerprint")

	// The record no longer vouches for any request: another body is not
	// a conflict with a job that is gone.
	vanish(second)
	code, third, _ := post("k", `{"task":"plan","payload":{}}`)
	assert.Equal(t, http.StatusAccepted, code)
	assert.NotContains(t, []string{first, second}, third)

	// Concurrent retries of a stale key agree on one new job.
	vanish(third)
	ids := make([]string, 12)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, id, _ := post("k", body)
			assert.Equal(t, http.StatusAccepted, code)
			ids[i] = id
		}()
	}
	wg.Wait()
	for _, id := range ids {
		assert.Equal(t, ids[0], id)
	}
	assert.NotContains(t, []string{first, second, third}, ids[0])
	assert.Len(t, s.RDB.Keys(ctx, "job:*:events").Val(), 1, "one job created for them all")
}

// With the backlog full, a stale key is no accepted request to hand back:
// the retry is refused like any new work.
func TestIdempotencyKeyOfVanishedJobBacklogFull(t *testing.T) {
	testsvc.EachRedis(t, testIdempotencyKeyOfVanishedJobBacklogFull)
}

func testIdempotencyKeyOfVanishedJobBacklogFull(t *testing.T) {
	set := testSettings()
	set.BacklogLimit = 1
	s := startServer(t, set)
	ctx := context.Background()
	hdr := map[string]string{"Idempotency-Key": "full"}
	body := `{"task":"chat","payload":{}}`
	resp, b := s.post(t, "/v1/jobs", body, hdr)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, b)
	var cr struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(b), &cr))
	resp, b = s.post(t, "/v1/jobs", body, nil)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, b)
	require.NoError(t, s.RDB.Del(ctx, jobs.JobKey(cr.JobID), jobs.EventsKey(cr.JobID)).Err())

	resp, b = s.post(t, "/v1/jobs", body, hdr)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, b)
	assert.Equal(t, "backlog_full", errorCode(t, b))
}
