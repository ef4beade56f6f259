package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// gatewayOnly runs runDaemon with the gateway and no plugin until the test
// ends, on the Redis at redisAddr (database db): their own stops (the
// worker's blocking read) would blur how long the gateway's takes. It
// returns the base URL, a cancel that starts the stop, and runDaemon's
// result.
func gatewayOnly(t *testing.T, redisAddr string, db int, grace string) (base string, stop context.CancelFunc, done <-chan error) {
	t.Helper()
	saved := plugins
	plugins = nil
	t.Cleanup(func() { plugins = saved })
	env := map[string]string{
		"EUTERPE_REDIS_URL":      fmt.Sprintf("redis://%s/%d", redisAddr, db),
		"EUTERPE_EDGE_ADDR":      freeAddr(t),
		"EUTERPE_STATE_DIR":      t.TempDir(),
		"EUTERPE_SHUTDOWN_GRACE": grace,
	}
	cfg, s := newServeConfig(envMap(env))
	require.NoError(t, cfg.Parse(nil))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		errc <- runDaemon(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), s, envMap(env))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(15 * time.Second):
			t.Error("runDaemon did not return")
		}
	})
	base = "http://" + env["EUTERPE_EDGE_ADDR"]
	require.Eventually(t, func() bool { code, _ := getPage(base + "/healthz"); return code == http.StatusOK },
		10*time.Second, 20*time.Millisecond)
	return base, cancel, errc
}

// openJobStream creates a job and opens its event stream, returning once
// the stream has sent hello and queued: the stream is then subscribed to
// the shared reader, whose blocking read has just begun.
func openJobStream(t *testing.T, base string) *bufio.Reader {
	t.Helper()
	resp, err := http.Post(base+"/v1/jobs", "application/json", strings.NewReader(`{"task":"chat","payload":{}}`))
	require.NoError(t, err)
	var created struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	resp, err = http.Get(base + "/v1/jobs/" + created.JobID + "/events")
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	r := bufio.NewReader(resp.Body)
	for _, want := range []string{"event: hello", "event: queued"} {
		for {
			line, err := r.ReadString('\n')
			require.NoError(t, err, "waiting for %q", want)
			if strings.TrimSpace(line) == want {
				break
			}
		}
	}
	return r
}

// ended reports, on the channel, when the stream's body ends.
func ended(r *bufio.Reader) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, r)
		out <- time.Now()
	}()
	return out
}

// A stream open at shutdown neither holds the HTTP server's shutdown nor
// keeps the gateway running for the rest of the shared reader's blocking
// read (2 s): with the shortest grace the daemon stops cleanly, well
// within it, instead of reporting the gateway as stuck.
func TestShutdownWithOpenStreamIsPrompt(t *testing.T) {
	testsvc.EachRedis(t, testShutdownWithOpenStreamIsPrompt)
}

func testShutdownWithOpenStreamIsPrompt(t *testing.T) {
	_, opt := testsvc.Redis(t)
	base, stop, done := gatewayOnly(t, opt.Addr, opt.DB, "1s")
	r := openJobStream(t, base)
	end := ended(r)
	start := time.Now()
	stop()
	select {
	case err := <-done:
		assert.NoError(t, err)
		assert.Less(t, time.Since(start), 1500*time.Millisecond, "stop took")
	case <-time.After(10 * time.Second):
		t.Fatal("runDaemon did not return")
	}
	select {
	case at := <-end:
		assert.Less(t, at.Sub(start), 1500*time.Millisecond, "the stream ended after")
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end")
	}
}

// The HTTP server ends its event streams as its shutdown begins, not when
// the shared reader lets go of them: here the reader's interrupted read
// answers 3 s late (its reply is held back on the way), and the stream
// still ends at once.
func TestShutdownEndsStreamsBeforeTheReader(t *testing.T) {
	testsvc.EachRedis(t, testShutdownEndsStreamsBeforeTheReader)
}

func testShutdownEndsStreamsBeforeTheReader(t *testing.T) {
	_, opt := testsvc.Redis(t)
	proxy := testsvc.NewLateProxy(t, opt.Addr)
	base, stop, done := gatewayOnly(t, proxy.Addr(), opt.DB, "10s")
	r := openJobStream(t, base)
	// The reader's read in progress was sent before Arm; a second stream
	// makes it read again, with a reply held back this time.
	proxy.Arm("XREAD", 3*time.Second)
	openJobStream(t, base)
	require.Eventually(t, func() bool { return proxy.Matched() > 0 }, 5*time.Second, 5*time.Millisecond)
	end := ended(r)
	start := time.Now()
	stop()
	select {
	case at := <-end:
		assert.Less(t, at.Sub(start), 1500*time.Millisecond, "the stream ended after")
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("runDaemon did not return")
	}
}
