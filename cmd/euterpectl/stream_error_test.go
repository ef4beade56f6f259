package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// submitJob enqueues a job through the command and returns its id.
func submitJob(t *testing.T, url string) string {
	t.Helper()
	code, out, errOut := runCtl("jobs", "submit", "--server", url, "--task", "chat", "--payload", "@-")
	require.Equal(t, 0, code, errOut)
	var cr struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &cr))
	return cr.JobID
}

// A job whose events the edge cannot read (its events key holds something
// other than a stream) gets a stream_error frame instead of events. That
// frame is no event of the job: it is not printed as one, it names its
// code on stderr, and the stream is not reopened, since every stream would
// end the same way until someone repairs the key.
func TestEventsOfUnreadableStreamEndAtOnce(t *testing.T) {
	url, store, streams := startCountingGateway(t)
	ctx := context.Background()
	id := submitJob(t, url)
	rdb := store.Redis()
	require.NoError(t, rdb.Del(ctx, jobs.EventsKey(id)).Err())
	require.NoError(t, rdb.Set(ctx, jobs.EventsKey(id), "not a stream", time.Minute).Err())
	code, out, errOut := runCtl("jobs", "events", "--server", url, id)
	assert.Equal(t, 1, code, errOut)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "events_not_a_stream")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	assert.Equal(t, int64(1), streams.Load(), "reopened")
}

// Cancelling a job whose status the edge does not know is its 409
// job_status_unknown: exit 1 naming the code, the job left as it was.
func TestCancelOfUnknownStatusFails(t *testing.T) {
	url, store := startGateway(t)
	ctx := context.Background()
	id := submitJob(t, url)
	require.NoError(t, store.Redis().HSet(ctx, jobs.JobKey(id), "status", "paused").Err())
	code, out, errOut := runCtl("jobs", "cancel", "--server", url, id)
	assert.Equal(t, 1, code, errOut)
	assert.Empty(t, out)
	assert.Contains(t, errOut, "409")
	assert.Contains(t, errOut, "job_status_unknown")
	assert.Equal(t, "paused", store.Redis().HGet(ctx, jobs.JobKey(id), "status").Val())
}
