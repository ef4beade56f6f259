package gateway_test

import (
	"context"
	"encoding/json"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// framesWithin reads an event stream until it ends, failing the test if
// that takes longer than d (a stalled stream would otherwise hang).
func framesWithin(t *testing.T, c *sseClient, d time.Duration) []frame {
	t.Helper()
	type result struct {
		fs  []frame
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var out []frame
		for {
			f, err := c.next()
			if err != nil {
				if err.Error() == "EOF" {
					err = nil
				}
				ch <- result{out, err}
				return
			}
			out = append(out, f)
		}
	}()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.fs
	case <-time.After(d):
		_ = c.resp.Body.Close()
		r := <-ch
		t.Fatalf("stream did not end within %v; got %v", d, ids(r.fs))
		return nil
	}
}

// nextWithin returns the next frame, failing the test after d.
func nextWithin(t *testing.T, c *sseClient, d time.Duration) frame {
	t.Helper()
	type result struct {
		f   frame
		err error
	}
	ch := make(chan result, 1)
	go func() {
		f, err := c.next()
		ch <- result{f, err}
	}()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.f
	case <-time.After(d):
		_ = c.resp.Body.Close()
		<-ch
		t.Fatalf("no frame within %v", d)
		return frame{}
	}
}

// A client whose Last-Event-ID is ahead of the stream must not stop live
// delivery to the other clients of that job.
func TestSSEFutureLastEventIDDoesNotStallOthers(t *testing.T) {
	testsvc.EachRedis(t, testSSEFutureLastEventIDDoesNotStallOthers)
}

func testSSEFutureLastEventIDDoesNotStallOthers(t *testing.T) {
	for _, order := range []string{"future first", "future second"} {
		t.Run(order, func(t *testing.T) {
			s := startServer(t, testSettings())
			ctx := context.Background()
			id := newJob(t, s)
			future := map[string]string{"Last-Event-ID": "99999999999999-0"}
			var a, b *sseClient
			if order == "future first" {
				a = s.events(t, id, future, "")
				_, _ = a.next() // hello
				require.Eventually(t, func() bool { return s.GW.Hub().Feeds() == 1 }, 5*time.Second, 5*time.Millisecond)
				b = s.events(t, id, nil, "")
			} else {
				b = s.events(t, id, nil, "")
				_, _ = b.next()
				require.Eventually(t, func() bool { return s.GW.Hub().Feeds() == 1 }, 5*time.Second, 5*time.Millisecond)
				a = s.events(t, id, future, "")
				_, _ = a.next()
			}
			if order == "future first" {
				hello, err := b.next()
				require.NoError(t, err)
				require.Equal(t, "hello", hello.Event)
			}
			queued, err := b.next()
			require.NoError(t, err)
			require.Equal(t, "queued", queued.Event)

			_, err = s.Store.SetRunning(ctx, id, "worker.start", nil)
			require.NoError(t, err)
			running := nextWithin(t, b, 10*time.Second) // live, before the job ends
			require.Equal(t, "running", running.Event)
			_, err = s.Store.Finish(ctx, id, jobs.Done, "worker.finish", json.RawMessage(`{}`), nil, "")
			require.NoError(t, err)
			rest := framesWithin(t, b, 10*time.Second)
			require.Len(t, rest, 1, ids(rest))
			assert.Equal(t, "done", rest[0].Event)
			// The client ahead saw nothing new, but its stream ends with
			// the job rather than idling on heartbeats until the job's TTL.
			assert.Empty(t, framesWithin(t, a, 10*time.Second))
		})
	}
}

// The largest possible Last-Event-ID on a finished job with more than a
// catch-up page of events ends the stream at once: its successor once
// wrapped to 0-0, and the replay fetched the first page for ever.
func TestSSELargestLastEventIDEnds(t *testing.T) {
	testsvc.EachRedis(t, testSSELargestLastEventIDEnds)
}

func testSSELargestLastEventIDEnds(t *testing.T) {
	s := startServer(t, testSettings())
	ctx := context.Background()
	id := newJob(t, s)
	for i := range 250 {
		progress(t, s, id, i)
	}
	_, err := s.Store.SetRunning(ctx, id, "worker.start", nil)
	require.NoError(t, err)
	_, err = s.Store.Finish(ctx, id, jobs.Done, "worker.finish", json.RawMessage(`{}`), nil, "")
	require.NoError(t, err)
	c := s.events(t, id, map[string]string{"Last-Event-ID": "18446744073709551615-18446744073709551615"}, "")
	fs := framesWithin(t, c, 5*time.Second)
	require.Len(t, fs, 1, ids(fs))
	assert.Equal(t, "hello", fs[0].Event)
}

// Ids between two entries (here in the gap between two milliseconds, with
// more than a catch-up page after it) resume exactly after that point, for
// clients arriving together and for one arriving while the job is watched.
func TestSSEResumeFromBetweenEntries(t *testing.T) {
	testsvc.EachRedis(t, testSSEResumeFromBetweenEntries)
}

func testSSEResumeFromBetweenEntries(t *testing.T) {
	s := startServer(t, testSettings())
	ctx := context.Background()
	id := newJob(t, s)
	var before []string
	for i := range 3 {
		before = append(before, progress(t, s, id, i))
	}
	gapStart := jobs.MustStreamID(before[len(before)-1])
	time.Sleep(3 * time.Millisecond)
	var after []string
	for i := range 260 {
		after = append(after, progress(t, s, id, 100+i))
	}
	require.Less(t, gapStart.MS, jobs.MustStreamID(after[0]).MS, "the test needs a gap between two milliseconds")
	between := []string{gapStart.Next().Next().String(), gapStart.Next().String(), gapStart.Next().Next().Next().String()}

	clients := make([]*sseClient, len(between))
	done := make(chan int, len(between))
	for i, b := range between {
		go func() {
			clients[i] = s.events(t, id, map[string]string{"Last-Event-ID": b}, "")
			done <- i
		}()
	}
	for range between {
		<-done
	}
	_, err := s.Store.SetRunning(ctx, id, "worker.start", nil)
	require.NoError(t, err)
	_, err = s.Store.Finish(ctx, id, jobs.Done, "worker.finish", json.RawMessage(`{}`), nil, "")
	require.NoError(t, err)
	for i, c := range clients {
		fs := framesWithin(t, c, 15*time.Second)
		require.Len(t, fs, 1+len(after)+2, "client %d (after %s)", i, between[i])
		assert.Equal(t, "hello", fs[0].Event)
		for j, want := range after {
			require.Equal(t, want, fs[1+j].ID, "client %d frame %d", i, j)
		}
		assert.Equal(t, []string{"running", "done"}, []string{fs[len(fs)-2].Event, fs[len(fs)-1].Event})
	}
}
