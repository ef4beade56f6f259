package runner_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
)

// slowPutProxy is a TCP proxy in front of the real S3 server that takes
// the bytes of any connection carrying a PUT a few at a time: an endpoint
// that accepts the connection and the request, then reads the body slower
// than anyone would wait for. Other requests pass at full speed.
type slowPutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newSlowPutProxy(t *testing.T, upstream string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &slowPutProxy{ln: ln}
	go p.serve(upstream)
	t.Cleanup(p.close)
	return "http://" + ln.Addr().String()
}

func (p *slowPutProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *slowPutProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *slowPutProxy) serve(upstream string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(c)
		p.track(u)
		go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		go p.forward(c, u)
	}
}

// forward copies client bytes upstream. Once a PUT is seen on the
// connection, whatever of it was read already goes on 16 bytes every
// 200 ms, and the client is read no faster, so a large body meets a full
// send buffer, as with a real slow reader.
func (p *slowPutProxy) forward(c, u net.Conn) {
	defer u.Close()
	buf := make([]byte, 32<<10)
	slow := false
	for {
		want := buf
		if slow {
			want = buf[:16]
		}
		n, err := c.Read(want)
		chunk := want[:n]
		slow = slow || bytes.HasPrefix(chunk, []byte("PUT "))
		for len(chunk) > 0 {
			step := len(chunk)
			if slow {
				step = min(step, 16)
				time.Sleep(200 * time.Millisecond)
			}
			if _, werr := u.Write(chunk[:step]); werr != nil {
				return
			}
			chunk = chunk[step:]
		}
		if err != nil {
			return
		}
	}
}

// TestSlowOutputEndpointTimesOut: an output endpoint that takes the upload
// slower and slower holds the runner's slot no longer than
// EUTERPE_RUNNER_UPLOAD_TIMEOUT; the attempt fails as a retryable
// storage_timeout, well before the stall timeout, and leaves no scratch.
func TestSlowOutputEndpointTimesOut(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("src.wav", 1)
		upstream := e.s3.Endpoint[len("http://"):]
		slow := newSlowPutProxy(t, upstream)
		id := e.enqueue("src.wav", oneOpus, func(j *inbox.NewJob) { j.Output.Endpoint = slow })
		r := e.runner(func(s *runner.Settings) {
			s.UploadTimeout = time.Second
			// Both far beyond the bound under test: neither may be what
			// ends the upload.
			s.StorageTimeout = 20 * time.Second
			s.StallTimeout = 20 * time.Second
		})
		start := time.Now()
		ok, err := r.RunOnce(context.Background())
		require.NoError(t, err)
		require.True(t, ok, "claimed")
		took := time.Since(start)
		v := e.view(id)
		require.NotNil(t, v.LastError, "status %s", v.LastError)
		require.Equal(t, schema.StatusQueued, v.Status, "retryable: back in the queue")
		require.Equal(t, "storage_timeout", v.LastError.Code, "message %q", v.LastError.Message)
		require.Less(t, took, 10*time.Second)
		e.scratchEmpty()
	})
}
