package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// dialSmallWindow connects to s with a receive buffer of rcvbuf bytes, so
// that what the client has not read soon holds the server's writes back.
func dialSmallWindow(t *testing.T, s *server, rcvbuf int) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// pacedReader reads at most rate bytes a second on average, in reads of
// at most 16 KiB: a client that reads steadily, however slowly.
type pacedReader struct {
	r     io.Reader
	rate  float64
	start time.Time
	n     int
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	n, err := p.r.Read(b[:min(len(b), 16<<10)])
	p.n += n
	if ahead := time.Duration(float64(p.n)/p.rate*float64(time.Second)) - time.Since(p.start); ahead > 0 {
		time.Sleep(ahead)
	}
	return n, err
}

// A client that keeps reading, slower than a frame can be taken in within
// the write timeout, still gets the whole done frame: the deadline moves
// on with each piece the client takes, where one deadline for the whole
// frame would cut it mid-frame (and again after every resume).
func TestSSESlowReaderGetsLargeFrame(t *testing.T) {
	testsvc.EachRedis(t, testSSESlowReaderGetsLargeFrame)
}

func testSSESlowReaderGetsLargeFrame(t *testing.T) {
	// The frame takes the client over 5 s, more than twice the timeout
	// and far more than the socket buffers hold. The rate is well above
	// the least a client must keep up: Linux lets a writer blocked on a
	// full send buffer go on only once about 1 MiB of it is free, a third
	// of a second at this rate, and the rest of the timeout is room for a
	// busy machine's stalls.
	const (
		timeout = 2 * time.Second
		rate    = 3e6      // bytes a second
		size    = 16 << 20 // the largest result of an exec or http backend
	)
	set := testSettings()
	set.WriteTimeout = timeout
	s := startServer(t, set)
	ctx := context.Background()
	id := newJob(t, s)
	result := json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", size)))
	_, err := s.Store.SetRunning(ctx, id, "worker.start", nil)
	require.NoError(t, err)
	doneID, err := s.Store.Finish(ctx, id, jobs.Done, "worker.finish", result, nil, "")
	require.NoError(t, err)

	conn := dialSmallWindow(t, s, 64<<10)
	_, err = fmt.Fprintf(conn, "GET /v1/jobs/%s/events HTTP/1.1\r\nHost: x\r\n\r\n", id)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Minute)))
	got := readFrames(t, &pacedReader{r: conn, rate: rate})
	var events []string
	var done frame
	for _, f := range got {
		events = append(events, f.Event)
		if f.Event == "done" {
			done = f
		}
	}
	// The log says whether the stream was dropped.
	require.Equal(t, []string{"hello", "queued", "running", "done"}, events, "log: %s", s.Log)
	assert.Equal(t, doneID, done.ID)
	var ev struct {
		Data json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(done.Data), &ev))
	assert.True(t, string(result) == string(ev.Data), "the result came altered")
	assert.NotContains(t, s.Log.String(), "dropped a stalled event stream client")
}

// A client that takes a few bytes now and then, each time within the
// write timeout, is still dropped: a piece of a frame must be taken whole
// within the timeout, not merely touched.
func TestSSETricklingClientDropped(t *testing.T) {
	testsvc.EachRedis(t, testSSETricklingClientDropped)
}

func testSSETricklingClientDropped(t *testing.T) {
	set := testSettings()
	set.WriteTimeout = 300 * time.Millisecond
	s := startServer(t, set)
	ctx := context.Background()
	id := newJob(t, s)
	result := json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 8<<20)))
	_, err := s.Store.SetRunning(ctx, id, "worker.start", nil)
	require.NoError(t, err)
	_, err = s.Store.Finish(ctx, id, jobs.Done, "worker.finish", result, nil, "")
	require.NoError(t, err)

	conn := dialSmallWindow(t, s, 4096)
	_, err = fmt.Fprintf(conn, "GET /v1/jobs/%s/events HTTP/1.1\r\nHost: x\r\n\r\n", id)
	require.NoError(t, err)
	go func() { // ends when the connection is closed, by either side
		b := make([]byte, 16)
		for {
			time.Sleep(set.WriteTimeout / 3)
			if _, err := conn.Read(b); err != nil {
				return
			}
		}
	}()
	require.Eventually(t, func() bool { return strings.Contains(s.Log.String(), "dropped a stalled event stream client") },
		30*time.Second, 20*time.Millisecond, "the trickling client is still held")
}
