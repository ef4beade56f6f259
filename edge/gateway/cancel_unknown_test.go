package gateway_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Cancelling a job whose status is outside the state machine is refused
// with 409 job_status_unknown and writes nothing; it is not a server error
// (500) a client would retry.
func TestCancelOfUnknownStatusRefused(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		s := startServer(t, testSettings())
		ctx := context.Background()
		id := newJob(t, s)
		require.NoError(t, s.RDB.HSet(ctx, jobs.JobKey(id), "status", "paused").Err())
		before := s.RDB.HGetAll(ctx, jobs.JobKey(id)).Val()
		resp, body := s.post(t, "/v1/jobs/"+id+"/cancel", "", nil)
		assert.Equal(t, http.StatusConflict, resp.StatusCode, body)
		assert.Equal(t, "job_status_unknown", errorCode(t, body))
		assert.Equal(t, before, s.RDB.HGetAll(ctx, jobs.JobKey(id)).Val())
		assert.Len(t, s.RDB.XRange(ctx, jobs.EventsKey(id), "-", "+").Val(), 1)
	})
}
