package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/gateway"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A stream resumed from a finished job's terminal event (or from past it)
// sends hello and ends at once, as an auto-reconnecting browser would do
// after every finished job; one resumed before the terminal event sends
// the rest and ends.
func TestSSEResumeOfFinishedJobEnds(t *testing.T) {
	testsvc.EachRedis(t, testSSEResumeOfFinishedJobEnds)
}

func testSSEResumeOfFinishedJobEnds(t *testing.T) {
	// A stream that waited out the terminal grace instead of ending at
	// once would still be open when the wait below gives up, however
	// starved the machine; the heartbeat is long beside any stall, so a
	// beat before the end means the stream lingered.
	set := gateway.WithTerminalGrace(testSettings(), time.Minute)
	set.Heartbeat = 5 * time.Second
	s := startServer(t, set)
	ctx := context.Background()
	for _, terminal := range []string{jobs.Done, jobs.Error, jobs.Canceled} {
		id := newJob(t, s)
		_, err := s.Store.SetRunning(ctx, id, "worker.start", nil)
		require.NoError(t, err)
		p := progress(t, s, id, 1)
		var last string
		switch terminal {
		case jobs.Canceled:
			last, err = s.Store.Cancel(ctx, id, "gateway.cancel", "t")
		default:
			last, err = s.Store.Finish(ctx, id, terminal, "worker.finish", json.RawMessage(`{}`), json.RawMessage(`{"code":"x"}`), "")
		}
		require.NoError(t, err)
		past := jobs.MustStreamID(last).Next().String()
		cases := []struct {
			name  string
			hdr   map[string]string
			query string
			want  []string
		}{
			{"header at terminal", map[string]string{"Last-Event-ID": last}, "", nil},
			{"query at terminal", nil, "?last_event_id=" + last, nil},
			{"past terminal", map[string]string{"Last-Event-ID": past}, "", nil},
			{"before terminal", map[string]string{"Last-Event-ID": p}, "", []string{terminal + "@" + last}},
		}
		for _, c := range cases {
			t.Run(terminal+"/"+c.name, func(t *testing.T) {
				start := time.Now()
				cl := s.events(t, id, c.hdr, c.query)
				hello, err := cl.next()
				require.NoError(t, err)
				require.Equal(t, "hello", hello.Event)
				done := cl.rest() // not cl.all: t may be gone when it ends
				select {
				case rest := <-done:
					assert.Equal(t, c.want, ids(rest))
					assert.Zero(t, cl.Beat, "no heartbeat before the end")
				case <-time.After(20 * time.Second):
					_ = cl.resp.Body.Close()
					t.Fatalf("stream of a finished job still open after %v", time.Since(start))
				}
			})
		}
	}
}

// A client that stops reading is dropped once a write has been blocked
// for EUTERPE_SSE_WRITE_TIMEOUT, instead of being held (with its socket's
// send queue) forever; it resumes with Last-Event-ID without gap or
// duplicate.
func TestSSEStalledClientDropped(t *testing.T) { testsvc.EachRedis(t, testSSEStalledClientDropped) }

func testSSEStalledClientDropped(t *testing.T) {
	set := testSettings()
	set.WriteTimeout = 300 * time.Millisecond
	s := startServer(t, set)
	ctx := context.Background()
	id := newJob(t, s)

	// A tiny receive window, so the server's writes block quickly.
	conn := dialSmallWindow(t, s, 4096)
	_, err := fmt.Fprintf(conn, "GET /v1/jobs/%s/events HTTP/1.1\r\nHost: x\r\n\r\n", id)
	require.NoError(t, err)

	// Far more than any socket buffers hold, then the terminal event.
	big := json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 64<<10)))
	const n = 200
	runID, err := s.Store.SetRunning(ctx, id, "worker.start", nil)
	require.NoError(t, err)
	evIDs := []string{runID}
	for range n {
		eid, err := s.Store.AppendEvent(ctx, id, "progress", "worker.stream", big)
		require.NoError(t, err)
		evIDs = append(evIDs, eid)
	}
	doneID, err := s.Store.Finish(ctx, id, jobs.Done, "worker.finish", json.RawMessage(`{}`), nil, "")
	require.NoError(t, err)

	// The server must give up on its own while the client does not read.
	// The sleep only lets the writes block; the wait after it is long, as a
	// handler that never gave up would hold its feed for good.
	time.Sleep(10 * set.WriteTimeout)
	require.Eventually(t, func() bool { return s.GW.Hub().Feeds() == 0 }, 30*time.Second, 20*time.Millisecond,
		"the stalled stream's handler is still running")
	require.Eventually(t, func() bool { return strings.Contains(s.Log.String(), "dropped a stalled event stream client") },
		10*time.Second, 20*time.Millisecond, "the drop is not logged: %s", s.Log)

	// What reached the socket before the drop ends without the terminal
	// event; a resume from the last id received gets the rest.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := readFrames(t, conn)
	require.NotEmpty(t, got)
	require.Equal(t, "hello", got[0].Event)
	got = got[1:]
	for _, f := range got {
		require.NotEqual(t, "done", f.Event, "the stalled client received the whole stream")
	}
	lastID := ""
	if len(got) > 0 {
		lastID = got[len(got)-1].ID
	}
	c := s.events(t, id, map[string]string{"Last-Event-ID": lastID}, "")
	hello, err := c.next()
	require.NoError(t, err)
	require.Equal(t, "hello", hello.Event)
	rest := c.all(t)
	var all []string
	for _, f := range append(got[:len(got):len(got)], rest...) {
		all = append(all, f.ID)
	}
	stored, err := s.Store.Events(ctx, id, "", 10000)
	require.NoError(t, err)
	var want []string
	for _, e := range stored {
		want = append(want, e.ID)
	}
	require.Equal(t, evIDs, want[1:len(want)-1])
	assert.Equal(t, want, all, "no gap, no duplicate")
	assert.Equal(t, doneID, all[len(all)-1])
}

// readFrames parses the frames of a raw HTTP/1.1 chunked SSE response
// until the connection or the response ends (cut frames at the end are
// dropped).
func readFrames(t *testing.T, conn io.Reader) []frame {
	t.Helper()
	br := bufio.NewReader(conn)
	for { // headers
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if line == "\r\n" {
			break
		}
	}
	var body strings.Builder
	for { // chunks
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		var size int
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "%x", &size); err != nil || size == 0 {
			break
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			break
		}
		body.Write(buf[:size])
	}
	var out []frame
	for _, block := range strings.Split(body.String(), "\n\n") {
		var f frame
		complete := false
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "id: "):
				f.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				f.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				f.Data = line[6:]
				complete = json.Valid([]byte(f.Data))
			}
		}
		if f.Event != "" && complete {
			out = append(out, f)
		}
	}
	return out
}
