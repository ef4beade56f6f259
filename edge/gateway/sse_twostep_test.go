package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A worker of another implementation may write the terminal status to the
// job hash and append the terminal event in two steps, not atomically. A
// stream that looks at the hash in between (when it opens, or at a
// heartbeat) must still deliver the terminal event before it ends.
func TestSSETwoStepFinishDeliversTerminalEvent(t *testing.T) {
	testsvc.EachRedis(t, testSSETwoStepFinishDeliversTerminalEvent)
}

func testSSETwoStepFinishDeliversTerminalEvent(t *testing.T) {
	tests := []struct {
		name    string
		connect bool // the stream opens between the two steps
	}{
		{"stream opens between the steps", true},
		{"heartbeat sees the hash between the steps", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set := testSettings()
			set.Heartbeat = 50 * time.Millisecond
			s := startServer(t, set)
			ctx := context.Background()
			id := newJob(t, s)
			_, err := s.Store.SetRunning(ctx, id, "foreign.start", nil)
			require.NoError(t, err)
			var cl *sseClient
			if !tc.connect {
				cl = s.events(t, id, nil, "")
				for _, want := range []string{"hello", "queued", "running"} {
					f, err := cl.next()
					require.NoError(t, err)
					require.Equal(t, want, f.Event)
				}
			}
			// Step one: the hash says done.
			require.NoError(t, s.RDB.HSet(ctx, jobs.JobKey(id), "status", jobs.Done, "result", `{"ok":true}`).Err())
			if tc.connect {
				cl = s.events(t, id, nil, "")
			} else {
				time.Sleep(4 * set.Heartbeat) // several heartbeats see it
			}
			// Step two, a moment later: the terminal event.
			time.Sleep(300 * time.Millisecond)
			done, err := s.RDB.XAdd(ctx, &redis.XAddArgs{Stream: jobs.EventsKey(id), Values: []any{
				"type", "done", "ts", "1", "step", "foreign.finish", "data", `{"ok":true}`}}).Result()
			require.NoError(t, err)
			fs := cl.all(t)
			require.NotEmpty(t, fs)
			assert.Equal(t, "done@"+done, fs[len(fs)-1].Event+"@"+fs[len(fs)-1].ID)
		})
	}
}
