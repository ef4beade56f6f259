package gateway_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/gateway"
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
			// Well past the pause between the steps, however starved the
			// machine: what is checked is that the stream waits, not how
			// long.
			set = gateway.WithTerminalGrace(set, 10*time.Second)
			seen := &doneReads{}
			s := startHookedServer(t, set, nil, seen)
			ctx := context.Background()
			id := newJob(t, s)
			_, err := s.Store.SetRunning(ctx, id, "foreign.start", nil)
			require.NoError(t, err)
			jobKey := jobs.JobKey(id)
			seen.key.Store(&jobKey)
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
			require.NoError(t, s.RDB.HSet(ctx, jobKey, "status", jobs.Done, "result", `{"ok":true}`).Err())
			if tc.connect {
				cl = s.events(t, id, nil, "")
			} else {
				// Waited for rather than slept on: a starved stream may
				// have sent no heartbeat by the time the event comes.
				require.Eventually(t, func() bool { return seen.n.Load() > 0 }, 10*time.Second, 5*time.Millisecond,
					"no heartbeat saw the hash terminal")
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

// doneReads counts the gateway's reads of a job's status that answered
// done, once the job's key is set. A read sent before the job's hash
// turned terminal may still answer done, so the count is taken from the
// replies, not from the commands sent.
type doneReads struct {
	key atomic.Pointer[string]
	n   atomic.Int64
}

func (h *doneReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *doneReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args, k := cmd.Args(), h.key.Load()
		if sc, ok := cmd.(*redis.StringCmd); ok && k != nil && cmd.Name() == "hget" && len(args) > 2 &&
			fmt.Sprint(args[1]) == *k && fmt.Sprint(args[2]) == "status" && sc.Val() == jobs.Done {
			h.n.Add(1)
		}
		return err
	}
}

func (h *doneReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A terminal event stored within the grace ends the stream even when the
// shared reader has not passed it on by then (a new job's stream joins
// the reader's next blocking read, which may come a whole read later; here
// the reply carrying the event is held back on its way): when the grace
// fires, the stream reads what Redis holds once more before it ends.
func TestSSETerminalGraceEndsWithStoredEvent(t *testing.T) {
	testsvc.EachRedis(t, testSSETerminalGraceEndsWithStoredEvent)
}

func testSSETerminalGraceEndsWithStoredEvent(t *testing.T) {
	var proxy *testsvc.LateProxy
	// The reply is held past the grace; both are kept short because the
	// proxy holds the test's end until the reply is through.
	s := startServerWith(t, gateway.WithTerminalGrace(testSettings(), time.Second), serverOptions{shutdownGrace: 5 * time.Second, readerVia: func(addr string) string {
		proxy = testsvc.NewLateProxy(t, addr)
		return proxy.Addr()
	}})
	ctx := context.Background()
	id := newJob(t, s)
	_, err := s.Store.SetRunning(ctx, id, "foreign.start", nil)
	require.NoError(t, err)
	// Step one: the hash says done.
	require.NoError(t, s.RDB.HSet(ctx, jobs.JobKey(id), "status", jobs.Done, "result", `{"ok":true}`).Err())
	// Nothing is watched yet, so the reader's next read is the stream's.
	proxy.Arm("XREAD", 3*time.Second)
	cl := s.events(t, id, nil, "")
	for _, want := range []string{"hello", "queued", "running"} {
		f, err := cl.next()
		require.NoError(t, err)
		require.Equal(t, want, f.Event)
	}
	// Step two, well within the grace, once the stream waits on the
	// reader and the reader's read is sent: stored any earlier, the event
	// would come with the stream's own catch-up.
	require.Eventually(t, func() bool { return s.GW.Hub().Feeds() == 1 && proxy.Matched() > 0 }, 5*time.Second, time.Millisecond)
	done, err := s.RDB.XAdd(ctx, &redis.XAddArgs{Stream: jobs.EventsKey(id), Values: []any{
		"type", "done", "ts", "1", "step", "foreign.finish", "data", `{"ok":true}`}}).Result()
	require.NoError(t, err)
	fs := cl.all(t)
	require.NotEmpty(t, fs, "the stream ended without the terminal event")
	assert.Equal(t, "done@"+done, fs[len(fs)-1].Event+"@"+fs[len(fs)-1].ID)
	assert.Equal(t, 1, proxy.Held(), "the reader's reply was held back")
}
