package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/gateway"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func newJob(t testing.TB, s *server) string {
	t.Helper()
	c, err := s.Store.Create(context.Background(), jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)
	return c.ID
}

func progress(t testing.TB, s *server, id string, n int) string {
	t.Helper()
	eid, err := s.Store.AppendEvent(context.Background(), id, "progress", "worker.step", json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)))
	require.NoError(t, err)
	return eid
}

func ids(fs []frame) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Event+"@"+f.ID)
	}
	return out
}

func TestSSEStreamsUntilTerminal(t *testing.T) { testsvc.EachRedis(t, testSSEStreamsUntilTerminal) }

func testSSEStreamsUntilTerminal(t *testing.T) {
	s := startServer(t, testSettings())
	ctx := context.Background()
	id := newJob(t, s)
	c := s.events(t, id, nil, "")
	require.Equal(t, 200, c.resp.StatusCode)
	assert.Equal(t, "text/event-stream", c.resp.Header.Get("Content-Type"))
	hello, err := c.next()
	require.NoError(t, err)
	assert.Equal(t, frame{Event: "hello", Data: `{"job_id":"` + id + `"}`}, hello)
	queued, err := c.next()
	require.NoError(t, err)
	assert.Equal(t, "queued", queued.Event)

	_, err = s.Store.SetRunning(ctx, id, "worker.start", nil)
	require.NoError(t, err)
	p := progress(t, s, id, 1)
	_, err = s.Store.Finish(ctx, id, jobs.Done, "worker.done", json.RawMessage(`{"answer":42}`), nil, "")
	require.NoError(t, err)

	rest := c.all(t)
	require.Len(t, rest, 3)
	assert.Equal(t, []string{"running", "progress", "done"}, []string{rest[0].Event, rest[1].Event, rest[2].Event})
	assert.Equal(t, p, rest[1].ID)
	var ev jobs.Event
	require.NoError(t, json.Unmarshal([]byte(rest[2].Data), &ev))
	assert.Equal(t, "done", ev.Type)
	assert.Equal(t, "worker.done", ev.Step)
	assert.JSONEq(t, `{"answer":42}`, string(ev.Data))
	assert.Equal(t, rest[2].ID, ev.ID)
}

// A resumed stream continues right after the given id, with neither gap nor
// duplicate, whether the id comes in the header or the query, and whether
// the shared reader already follows the job (catch-up then live) or not.
func TestSSEResumeWithoutGapOrDuplicate(t *testing.T) {
	testsvc.EachRedis(t, testSSEResumeWithoutGapOrDuplicate)
}

func testSSEResumeWithoutGapOrDuplicate(t *testing.T) {
	for _, via := range []string{"header", "query"} {
		for _, watched := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/watched=%v", via, watched), func(t *testing.T) {
				s := startServer(t, testSettings())
				id := newJob(t, s)
				var first *sseClient
				if watched {
					first = s.events(t, id, nil, "")
					_, _ = first.next() // hello
					_, _ = first.next() // queued
				}
				var evIDs []string
				for i := range 5 {
					evIDs = append(evIDs, progress(t, s, id, i))
				}
				if watched {
					for range 5 {
						_, err := first.next()
						require.NoError(t, err)
					}
				}
				var c *sseClient
				if via == "header" {
					c = s.events(t, id, map[string]string{"Last-Event-ID": evIDs[1]}, "")
				} else {
					c = s.events(t, id, nil, "?last_event_id="+evIDs[1])
				}
				hello, err := c.next()
				require.NoError(t, err)
				require.Equal(t, "hello", hello.Event)
				for i := 2; i < 5; i++ {
					f, err := c.next()
					require.NoError(t, err)
					assert.Equal(t, evIDs[i], f.ID)
				}
				live := progress(t, s, id, 5)
				_, err = s.Store.Cancel(context.Background(), id, "gateway.cancel", "test")
				require.NoError(t, err)
				rest := c.all(t)
				require.Len(t, rest, 2, ids(rest))
				assert.Equal(t, live, rest[0].ID)
				assert.Equal(t, "canceled", rest[1].Event)
			})
		}
	}
}

func TestSSERejectsBadLastEventID(t *testing.T) { testsvc.EachRedis(t, testSSERejectsBadLastEventID) }

func testSSERejectsBadLastEventID(t *testing.T) {
	s := startServer(t, testSettings())
	id := newJob(t, s)
	resp, body := s.get(t, "/v1/jobs/"+id+"/events?last_event_id=banana")
	assert.Equal(t, 400, resp.StatusCode)
	assert.Contains(t, body, "invalid_last_event_id")
}

func TestSSEHeartbeat(t *testing.T) { testsvc.EachRedis(t, testSSEHeartbeat) }

func testSSEHeartbeat(t *testing.T) {
	set := testSettings()
	set.Heartbeat = 30 * time.Millisecond
	s := startServer(t, set)
	id := newJob(t, s)
	c := s.events(t, id, nil, "")
	for _, want := range []string{"hello", "queued"} {
		f, err := c.next()
		require.NoError(t, err)
		require.Equal(t, want, f.Event)
	}
	// Heartbeats are read as they come, not counted after a sleep: a
	// ticker holds one tick, so a starved stream writes one heartbeat
	// however long it was starved.
	c.beats(t, 2, 10*time.Second)
	p := progress(t, s, id, 1)
	f, err := c.next()
	require.NoError(t, err)
	assert.Equal(t, "progress@"+p, f.Event+"@"+f.ID, "events still come after heartbeats")
}

func TestSSEEndsWhenJobExpires(t *testing.T) { testsvc.EachRedis(t, testSSEEndsWhenJobExpires) }

func testSSEEndsWhenJobExpires(t *testing.T) {
	set := testSettings()
	set.Heartbeat = 30 * time.Millisecond
	s := startServer(t, set)
	id := newJob(t, s)
	c := s.events(t, id, nil, "")
	_, _ = c.next()
	_, _ = c.next()
	s.RDB.Del(context.Background(), jobs.JobKey(id))
	_, err := c.next()
	assert.ErrorIs(t, err, io.EOF)
}

func TestSSEEndsOnShutdown(t *testing.T) { testsvc.EachRedis(t, testSSEEndsOnShutdown) }

func testSSEEndsOnShutdown(t *testing.T) {
	// The HTTP server would give open requests a minute to end, so a stream
	// that waited for its job instead of ending on shutdown holds Stop that
	// long, far past the bound below. Nor may the stream, or the gateway's
	// Run, wait for the shared reader's blocking read (made 30 s here,
	// begun when the stream subscribed, just before queued) to time out.
	s := startServerFull(t, gateway.WithReadBlock(testSettings(), 30*time.Second), time.Minute, nil)
	id := newJob(t, s)
	c := s.events(t, id, nil, "")
	_, _ = c.next()
	_, _ = c.next()
	start := time.Now()
	s.Stop()
	_, err := c.next()
	assert.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second, "shutdown must not wait for open streams")
	select {
	case <-s.ran:
		assert.Less(t, time.Since(start), 10*time.Second, "the gateway's Run returned after")
	case <-time.After(20 * time.Second):
		t.Fatal("the gateway's Run did not return")
	}
}

// Many watching clients share one reader connection.
func TestSSEConnectionsBounded(t *testing.T) { testsvc.EachRedis(t, testSSEConnectionsBounded) }

func testSSEConnectionsBounded(t *testing.T) {
	s := startServer(t, testSettings())
	const jobsN, clients = 5, 60
	var jobIDs []string
	for range jobsN {
		jobIDs = append(jobIDs, newJob(t, s))
	}
	var cs []*sseClient
	for i := range clients {
		c := s.events(t, jobIDs[i%jobsN], nil, "")
		_, err := c.next()
		require.NoError(t, err)
		cs = append(cs, c)
	}
	for _, c := range cs {
		f, err := c.next()
		require.NoError(t, err)
		require.Equal(t, "queued", f.Event)
	}
	n := 0
	for _, line := range strings.Split(s.RDB.ClientList(context.Background()).Val(), "\n") {
		if strings.Contains(line, "name="+s.Name+" ") || strings.Contains(line, "name="+s.Name+"-sse ") {
			n++
		}
	}
	assert.LessOrEqual(t, n, 9, "pool of 8 plus one reader")
	assert.Equal(t, jobsN, s.GW.Hub().Feeds())
	for _, id := range jobIDs {
		_, err := s.Store.Cancel(context.Background(), id, "t", "t")
		require.NoError(t, err)
	}
	for _, c := range cs {
		rest := c.all(t)
		require.Len(t, rest, 1)
		assert.Equal(t, "canceled", rest[0].Event)
	}
}
