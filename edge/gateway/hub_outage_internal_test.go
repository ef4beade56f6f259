package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// While Redis cannot be reached the hub's reader retries with a growing
// pause and logs the outage once, and its recovery once, rather than a
// warning every 250 ms for as long as the outage lasts; afterwards it
// delivers what was written meanwhile.
func TestHubBacksOffWhileRedisIsDown(t *testing.T) {
	testsvc.EachRedis(t, testHubBacksOffWhileRedisIsDown)
}

func testHubBacksOffWhileRedisIsDown(t *testing.T) {
	rdb, opt := testsvc.Redis(t)
	proxy := testsvc.NewCutProxy(t, opt.Addr)
	ro := *opt
	ro.Addr = proxy.Addr()
	ro.MaxRetries = -1 // one attempt per read: the hub's own pacing is measured
	ro.DialTimeout = time.Second
	logs := &testsvc.LogBuffer{}
	h := NewHub(slog.New(slog.NewTextHandler(logs, nil)), &ro, rdb)
	reads := &testsvc.CommandCounter{Match: func(cmd redis.Cmder) bool { return cmd.Name() == "xread" }}
	h.reader.AddHook(reads)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); _ = h.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })

	store := jobs.NewStore(rdb)
	c, err := store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)
	sub, err := h.Subscribe(ctx, c.ID, jobs.MustStreamID(c.EventID))
	require.NoError(t, err)
	receive := func(id string, within time.Duration) {
		t.Helper()
		timeout := time.After(within)
		for {
			select {
			case e, ok := <-sub.C:
				require.True(t, ok, "subscription closed: %v", sub.Err())
				if e.ID == id {
					return
				}
			case <-timeout:
				t.Fatalf("event %s not delivered within %s", id, within)
			}
		}
	}
	progress := func() string {
		id, err := store.AppendEvent(ctx, c.ID, "progress", "t", json.RawMessage(`{}`))
		require.NoError(t, err)
		return id
	}
	receive(progress(), 5*time.Second)

	proxy.SetCut(true)
	before := reads.N()
	time.Sleep(3 * time.Second)
	// Pauses of 250 ms, 500 ms, 1 s, 2 s: four reads in 3 s where a
	// fixed 250 ms would make a dozen.
	assert.LessOrEqual(t, reads.N()-before, int64(6), "reads while Redis was down")
	assert.Equal(t, 1, strings.Count(logs.String(), "event hub cannot read from Redis"), "%s", logs)

	proxy.SetCut(false)
	// The pause in progress is at most retryMax.
	receive(progress(), retryMax+5*time.Second)
	assert.Equal(t, 1, strings.Count(logs.String(), "event hub reads from Redis again"), "%s", logs)
	assert.Equal(t, 1, strings.Count(logs.String(), "event hub cannot read from Redis"), "%s", logs)
}
