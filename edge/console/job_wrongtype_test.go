package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// The job page of a job whose key holds another type than a hash says so
// (409, as the gateway answers it) instead of failing with a server error.
func TestConsoleJobPageOfWrongTypeKey(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		rdb, _ := testsvc.Redis(t)
		store := jobs.NewStore(rdb)
		ctx := context.Background()
		e := mounted(t, store)
		cr, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
		require.NoError(t, err)
		require.NoError(t, rdb.Del(ctx, jobs.JobKey(cr.ID)).Err())
		require.NoError(t, rdb.Set(ctx, jobs.JobKey(cr.ID), "not a hash", 0).Err())
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/jobs/"+cr.ID, nil))
		assert.Equal(t, http.StatusConflict, rec.Code)
		assert.Contains(t, rec.Body.String(), cr.ID)
	})
}
