package jobs_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Every write after creation, the worker's and the gateway's alike, appends
// an event of exactly the contract's fields (type, ts, step, data; ts the
// write's time in ms, which is also updated_ts) and refreshes the TTL of
// job:{id} and job:{id}:events to the ttl_s the hash holds at that moment,
// whatever the job was created with.
func TestEveryEventRefreshesBothTTLs(t *testing.T) {
	testsvc.EachRedis(t, testEveryEventRefreshesBothTTLs)
}

func testEveryEventRefreshesBothTTLs(t *testing.T) {
	ctx := context.Background()
	running := func(st *jobs.Store, id string) error {
		_, err := st.SetRunning(ctx, id, "worker.start", nil)
		return err
	}
	tests := []struct {
		name     string
		prepare  func(st *jobs.Store, id string) error // nil: the job stays queued
		write    func(st *jobs.Store, id string) (string, error)
		wantType string
		status   jobs.Status
	}{
		{"running", nil, func(st *jobs.Store, id string) (string, error) {
			return st.SetRunning(ctx, id, "worker.start", json.RawMessage(`{"worker":"w"}`))
		}, "running", jobs.Running},
		{"running again after a reclaim", running, func(st *jobs.Store, id string) (string, error) {
			return st.SetRunning(ctx, id, "worker.start", nil)
		}, "running", jobs.Running},
		{"delta", running, func(st *jobs.Store, id string) (string, error) {
			return st.AppendEvent(ctx, id, "delta", "worker.stream", json.RawMessage(`{"text":"x"}`))
		}, "delta", jobs.Running},
		{"done", running, func(st *jobs.Store, id string) (string, error) {
			return st.Finish(ctx, id, jobs.Done, "worker.finish", json.RawMessage(`{"text":"ok"}`), nil, "")
		}, "done", jobs.Done},
		{"error", running, func(st *jobs.Store, id string) (string, error) {
			return st.Finish(ctx, id, jobs.Error, "worker.finish", nil, json.RawMessage(`{"code":"backend_error"}`), "")
		}, "error", jobs.Error},
		{"canceled while queued", nil, func(st *jobs.Store, id string) (string, error) {
			return st.Cancel(ctx, id, "gateway.cancel", "client")
		}, "canceled", jobs.Canceled},
		{"canceled while running", running, func(st *jobs.Store, id string) (string, error) {
			return st.Cancel(ctx, id, "gateway.cancel", "client")
		}, "canceled", jobs.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, rdb := newStore(t)
			c, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 120})
			require.NoError(t, err)
			id := c.ID
			if tc.prepare != nil {
				require.NoError(t, tc.prepare(st, id))
			}
			// The TTL comes from the hash's ttl_s, read at each write.
			require.NoError(t, rdb.HSet(ctx, jobs.JobKey(id), "ttl_s", "300").Err())
			for _, k := range []string{jobs.JobKey(id), jobs.EventsKey(id)} {
				require.True(t, rdb.Expire(ctx, k, 5*time.Second).Val())
			}

			before := time.Now().UnixMilli()
			eid, err := tc.write(st, id)
			after := time.Now().UnixMilli()
			require.NoError(t, err)

			for _, k := range []string{jobs.JobKey(id), jobs.EventsKey(id)} {
				assert.InDelta(t, 300, rdb.TTL(ctx, k).Val().Seconds(), 2, "TTL of %s", k)
			}
			h := rdb.HGetAll(ctx, jobs.JobKey(id)).Val()
			assert.Equal(t, tc.status, h["status"])
			last := rdb.XRevRangeN(ctx, jobs.EventsKey(id), "+", "-", 1).Val()
			require.Len(t, last, 1)
			assert.Equal(t, eid, last[0].ID)
			fields := make([]string, 0, len(last[0].Values))
			for f := range last[0].Values {
				fields = append(fields, f)
			}
			assert.ElementsMatch(t, []string{"type", "ts", "step", "data"}, fields)
			assert.Equal(t, tc.wantType, last[0].Values["type"])
			ts, _ := last[0].Values["ts"].(string)
			ms, err := strconv.ParseInt(ts, 10, 64)
			require.NoError(t, err, "ts %q is an integer", ts)
			assert.True(t, ms >= before && ms <= after, "ts %d outside [%d, %d]", ms, before, after)
			assert.Equal(t, ts, h["updated_ts"])
			data, _ := last[0].Values["data"].(string)
			assert.True(t, json.Valid([]byte(data)), "data %q is JSON", data)
		})
	}
}
