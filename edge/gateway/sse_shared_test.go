package gateway_test

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// The frame of an event the shared reader hands to many streams is built
// once: a done event carries the job's whole result, and streams that
// each encoded and copied it would hold several times its size apiece at
// the same moment.
func TestSSELargeEventFrameBuiltOnce(t *testing.T) {
	testsvc.EachRedis(t, testSSELargeEventFrameBuiltOnce)
}

func testSSELargeEventFrameBuiltOnce(t *testing.T) {
	const clients, size = 16, 2 << 20
	s := startServer(t, testSettings())
	ctx := context.Background()
	id := newJob(t, s)
	cls := make([]*sseClient, clients)
	for i := range cls {
		cls[i] = s.events(t, id, nil, "")
		for _, want := range []string{"hello", "queued"} {
			f, err := cls[i].next()
			require.NoError(t, err)
			require.Equal(t, want, f.Event)
		}
	}
	data := `{"text":"` + strings.Repeat("a", size) + `"}`
	sinks := make([]*tailSink, clients)
	var wg sync.WaitGroup
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := s.RDB.XAdd(ctx, &redis.XAddArgs{Stream: jobs.EventsKey(id), Values: []any{
		"type", "done", "ts", "1", "step", "worker.finish", "data", data}}).Result()
	require.NoError(t, err)
	for i, c := range cls {
		sinks[i] = &tailSink{}
		wg.Go(func() { _, _ = io.Copy(sinks[i], c.r) })
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		for _, c := range cls {
			_ = c.resp.Body.Close()
		}
		t.Fatal("the streams did not end")
	}
	runtime.ReadMemStats(&after)
	for i, k := range sinks {
		assert.GreaterOrEqual(t, k.n, size, "client %d", i)
		assert.True(t, k.done, "client %d got no done frame", i)
	}
	// Redis's reply is read once and the frame built once: a few times
	// the result in all, where a frame built by every stream would be a
	// few times the result for each of them.
	allocated := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, allocated, uint64(clients*size), "bytes allocated while %d streams sent a %d-byte event", clients, size)
}

// tailSink counts what it is written and notes a done frame's event line.
type tailSink struct {
	n    int
	tail []byte
	done bool
}

func (k *tailSink) Write(p []byte) (int, error) {
	k.n += len(p)
	const line = "\nevent: done\n"
	// The line may straddle two writes: the end of the last one is kept.
	head := p[:min(len(p), len(line))]
	if bytes.Contains(append(k.tail, head...), []byte(line)) || bytes.Contains(p, []byte(line)) {
		k.done = true
	}
	k.tail = append(k.tail[:0], p[max(0, len(p)-len(line)):]...)
	return len(p), nil
}
