package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// lateProxy forwards TCP connections to a Redis server. Armed, it holds
// back the reply to the next request holding match: the server has run
// it, only the answer is late, past the client's read timeout.
type lateProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	match  []byte
	delay  time.Duration
	conns  []net.Conn
	wg     sync.WaitGroup
	held   atomic.Int32 // replies held back
}

func newLateProxy(t *testing.T, target string) *lateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &lateProxy{ln: ln, target: target}
	x.wg.Add(1)
	go x.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		x.mu.Lock()
		for _, c := range x.conns {
			_ = c.Close()
		}
		x.mu.Unlock()
		x.wg.Wait()
	})
	return x
}

// arm holds back the reply to the next request holding match for d.
func (x *lateProxy) arm(match string, d time.Duration) {
	x.mu.Lock()
	x.match, x.delay = []byte(match), d
	x.mu.Unlock()
}

// take disarms the proxy when b is the request it waits for, returning
// the delay of its reply.
func (x *lateProxy) take(b []byte) time.Duration {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.match == nil || !bytes.Contains(b, x.match) {
		return 0
	}
	x.match = nil
	x.held.Add(1)
	return x.delay
}

func (x *lateProxy) accept() {
	defer x.wg.Done()
	for {
		c, err := x.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", x.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		x.mu.Lock()
		x.conns = append(x.conns, c, up)
		x.mu.Unlock()
		var hold atomic.Int64 // the delay of this connection's next reply
		x.wg.Add(2)
		go func() {
			defer x.wg.Done()
			defer up.Close()
			pipe(c, up, func(b []byte) {
				if d := x.take(b); d > 0 {
					hold.Store(int64(d))
				}
			})
		}()
		go func() {
			defer x.wg.Done()
			defer c.Close()
			pipe(up, c, func([]byte) {
				if d := hold.Swap(0); d > 0 {
					time.Sleep(time.Duration(d))
				}
			})
		}()
	}
}

// pipe copies from to to, calling each with every chunk before passing it.
func pipe(from, to net.Conn, each func([]byte)) {
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			each(buf[:n])
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A finish whose reply is lost though Redis ran it (the read timed out, the
// client does not resend by itself) is written again by the pool with the
// same token: that attempt is answered as the first was, so the job is
// counted as done, with one terminal event. Before, the second attempt was
// refused as already finished and the job was not counted at all.
func TestFinishRetriedAfterLostReplyIsCounted(t *testing.T) {
	testsvc.EachRedis(t, testFinishRetriedAfterLostReplyIsCounted)
}

func testFinishRetriedAfterLostReplyIsCounted(t *testing.T) {
	rdb, st, opts := newRedis(t)
	ctx := context.Background()
	proxy := newLateProxy(t, opts.Addr)
	po := *opts
	po.Addr = proxy.ln.Addr().String()
	po.MaxRetries = -1
	po.ReadTimeout = 300 * time.Millisecond
	via := redis.NewClient(&po)
	t.Cleanup(func() { _ = via.Close() })
	release := make(chan struct{})
	be := backend.NewRegistry(map[string]backend.Backend{"chat": backend.Func(func(ctx context.Context, _ backend.Request, _ backend.Delta) (json.RawMessage, error) {
		select {
		case <-release:
			return json.RawMessage(`{"ok":true}`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})})
	logs := &testsvc.LogBuffer{}
	p, err := New(slog.New(slog.NewJSONHandler(logs, nil)), via, jobs.NewStore(via), "lost-reply", testSettings(), be)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := p.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	id := create(t, st, "chat", `{}`)
	waitStatus(t, st, id, jobs.Running, 5*time.Second)

	proxy.arm(StepFinish, time.Second)
	close(release)

	if j := waitTerminal(t, st, id, 5*time.Second); j.Status != jobs.Done {
		t.Fatalf("job %s", j.Status)
	}
	waitNoPending(t, rdb, 5*time.Second)
	for deadline := time.Now().Add(5 * time.Second); len(p.tracked()) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("job still tracked")
		}
	}
	if proxy.held.Load() != 1 {
		t.Fatalf("the finish's reply was not held back")
	}
	if n := terminalCount(eventTypes(t, st, id)); n != 1 {
		t.Errorf("%d terminal events", n)
	}
	if got := finishedCounts(t, reg); got["chat/done"] != 1 || len(got) != 1 {
		t.Errorf("finished = %v, want chat/done 1\n%s", got, logs)
	}
}
