package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A queue message is acknowledged only once its job's hash holds the final
// status and the terminal event is stored: a finish Redis refuses (here the
// capture stream holds a string, so every transition is refused with
// nothing written) leaves the job running with no terminal event and its
// message pending, and the message is acknowledged only when a later run,
// recovered from the pending list, has written both.
func TestRefusedFinishIsNotAcknowledged(t *testing.T) {
	testsvc.EachRedis(t, testRefusedFinishIsNotAcknowledged)
}

func testRefusedFinishIsNotAcknowledged(t *testing.T) {
	ctx := context.Background()
	rdb, st, _ := newRedis(t)
	st.Capture = jobs.CaptureStream
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	var runs atomic.Int32
	be := backend.NewRegistry(map[string]backend.Backend{"chat": backend.Func(func(ctx context.Context, _ backend.Request, _ backend.Delta) (json.RawMessage, error) {
		started <- struct{}{}
		if runs.Add(1) == 1 {
			<-release
		}
		return json.RawMessage(`{"text":"ok"}`), nil
	})})
	var logs testsvc.LogBuffer
	p, err := New(slog.New(slog.NewJSONHandler(&logs, nil)), rdb, st, "w1", testSettings(), be)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	id := create(t, st, "chat", `{}`)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("job never started")
	}
	require.NoError(t, rdb.Set(ctx, jobs.CaptureStream, "written by hand", 0).Err())
	close(release)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "left pending for recovery") {
		require.True(t, time.Now().Before(deadline), "finish never given up:\n%s", logs.String())
		time.Sleep(10 * time.Millisecond)
	}

	j, err := st.Get(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, jobs.Running, j.Status)
	assert.Equal(t, []string{"queued", "running"}, eventTypes(t, st, id))
	pend := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group,
		Start: "-", End: "+", Count: 10}).Val()
	require.Len(t, pend, 1, "message not acknowledged")
	assert.Equal(t, "w1", pend[0].Consumer)
	assert.EqualValues(t, 1, rdb.XLen(ctx, jobs.QueueStream).Val())

	// Repaired, the message is recovered once idle and finished for good.
	require.NoError(t, rdb.Del(ctx, jobs.CaptureStream).Err())
	if j := waitTerminal(t, st, id, 20*time.Second); j.Status != jobs.Done {
		t.Fatalf("status %s, want done", j.Status)
	}
	waitNoPending(t, rdb, 5*time.Second)
	types := eventTypes(t, st, id)
	assert.Equal(t, 1, terminalCount(types), "events %v", types)
	assert.Equal(t, jobs.Done, types[len(types)-1])
	assert.EqualValues(t, 2, runs.Load())
}
