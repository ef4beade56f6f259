package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/gateway"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

var serverSeq atomic.Int64

// server is a gateway served over a real listener on a real Redis.
type server struct {
	URL   string
	Name  string // client name of the gateway's connections
	RDB   *redis.Client
	Store *jobs.Store
	GW    *gateway.Gateway
	Log   *testsvc.LogBuffer // what the gateway logged, at info and above
	stop  context.CancelFunc
	done  chan struct{}
	ran   chan struct{} // closed when the gateway's Run has returned
}

func testSettings() gateway.Settings {
	s := gateway.DefaultSettings()
	s.BacklogInterval = 0
	s.Heartbeat = time.Second
	return s
}

func startServer(t testing.TB, set gateway.Settings) *server {
	t.Helper()
	return startRecordedServer(t, set, nil)
}

// startRecordedServer is startServer with every command the gateway sends
// (shared pool and SSE reader) recorded in cmds, when not nil.
func startRecordedServer(t testing.TB, set gateway.Settings, cmds *testsvc.CommandLog) *server {
	t.Helper()
	return startHookedServer(t, set, cmds)
}

// startHookedServer is startRecordedServer with hooks added to the shared
// pool (not the SSE reader's connection) as well.
func startHookedServer(t testing.TB, set gateway.Settings, cmds *testsvc.CommandLog, hooks ...redis.Hook) *server {
	t.Helper()
	return startServerFull(t, set, 5*time.Second, cmds, hooks...)
}

// startServerFull is startHookedServer with the time the HTTP server gives
// open requests to end on Stop set by the caller.
func startServerFull(t testing.TB, set gateway.Settings, shutdownGrace time.Duration, cmds *testsvc.CommandLog, hooks ...redis.Hook) *server {
	t.Helper()
	return startServerWith(t, set, serverOptions{shutdownGrace: shutdownGrace, cmds: cmds, hooks: hooks})
}

// serverOptions are what startServerWith takes besides the settings.
type serverOptions struct {
	shutdownGrace time.Duration // the time the HTTP server gives open requests to end on Stop
	cmds          *testsvc.CommandLog
	hooks         []redis.Hook // added to the shared pool, not the SSE reader
	// readerVia, when set, gives the address the SSE reader dials in
	// place of the Redis server's (a proxy in front of it).
	readerVia func(redisAddr string) string
}

func startServerWith(t testing.TB, set gateway.Settings, o serverOptions) *server {
	t.Helper()
	shutdownGrace, cmds, hooks := o.shutdownGrace, o.cmds, o.hooks
	rdb, opt := testsvc.Redis(t)
	// A name of its own, so connection counts never include another
	// test's connections that the server has not finished closing.
	opt.ClientName = fmt.Sprintf("euterpe-edge-test-%d", serverSeq.Add(1))
	opt.PoolSize = 8
	if cmds != nil {
		cmds.Attach(opt)
	}
	shared := redis.NewClient(opt)
	if cmds != nil {
		shared.AddHook(cmds)
	}
	for _, h := range hooks {
		shared.AddHook(h)
	}
	t.Cleanup(func() { _ = shared.Close() })
	logs := &testsvc.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	store := jobs.NewStore(shared)
	readerOpt := opt
	if o.readerVia != nil {
		ro := *opt
		ro.Addr = o.readerVia(opt.Addr)
		readerOpt = &ro
	}
	gw := gateway.New(log, set, store, readerOpt)
	e := daemon.NewEcho(log)
	gw.Mount(e)
	ln, err := daemon.Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{URL: "http://" + ln.Addr().String(), Name: opt.ClientName, RDB: rdb, Store: store, GW: gw, Log: logs, stop: cancel, done: make(chan struct{}), ran: make(chan struct{})}
	go func() {
		defer close(s.done)
		go func() { defer close(s.ran); _ = gw.Run(ctx) }()
		_ = daemon.ServeUntil(ctx, daemon.NewHTTPServer(e), ln, shutdownGrace)
	}()
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down and waits for it.
func (s *server) Stop() {
	s.stop()
	<-s.done
}

func (s *server) post(t testing.TB, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (s *server) get(t testing.TB, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(s.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// frame is one parsed SSE frame.
type frame struct{ ID, Event, Data string }

// sseClient reads frames from an event stream.
type sseClient struct {
	resp *http.Response
	r    *bufio.Reader
	Beat int
}

func (s *server) events(t testing.TB, id string, hdr map[string]string, query string) *sseClient {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+"/v1/jobs/"+id+"/events"+query, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return &sseClient{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next frame, or io.EOF when the stream ended.
func (c *sseClient) next() (frame, error) {
	var f frame
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return f, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if f.Event != "" {
				return f, nil
			}
		case strings.HasPrefix(line, ":"):
			c.Beat++
		case strings.HasPrefix(line, "id: "):
			f.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.Event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.Data = line[6:]
		}
	}
}

// beats reads until the stream has sent n heartbeats in all, failing on
// anything else in between or when they take longer than within.
func (c *sseClient) beats(t testing.TB, n int, within time.Duration) {
	t.Helper()
	// The body has no read deadline; closing it ends a blocked read.
	timer := time.AfterFunc(within, func() { _ = c.resp.Body.Close() })
	for c.Beat < n {
		line, err := c.r.ReadString('\n')
		require.NoError(t, err, "%d of %d heartbeats within %s", c.Beat, n, within)
		switch {
		case strings.HasPrefix(line, ":"):
			c.Beat++
		case line != "\n":
			require.Failf(t, "not a heartbeat", "%q", line)
		}
	}
	require.True(t, timer.Stop(), "%d heartbeats took longer than %s", n, within)
}

// rest reads frames, in a goroutine of its own, until the stream ends or
// breaks, and then sends them. It needs no t, which may be gone by then:
// a caller that stops waiting closes c.resp.Body, which ends it.
func (c *sseClient) rest() <-chan []frame {
	out := make(chan []frame, 1)
	go func() {
		var fs []frame
		for {
			f, err := c.next()
			if err != nil {
				out <- fs
				return
			}
			fs = append(fs, f)
		}
	}()
	return out
}

// all reads frames until the stream ends.
func (c *sseClient) all(t testing.TB) []frame {
	t.Helper()
	var out []frame
	for {
		f, err := c.next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out = append(out, f)
	}
}
