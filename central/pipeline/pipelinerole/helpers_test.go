package pipelinerole

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

var sets = []sqldb.Migrations{operators.Migrations(), ingest.Migrations(), pipeline.Migrations()}

// server is the role's routes and /ready on a real HTTP server.
type server struct {
	url   string
	token string
	role  *Role
	logs  *testsvc.LogBuffer
}

func testConfig() Config {
	c := Defaults()
	c.Visibility, c.Poll = 2*time.Second, 20*time.Millisecond
	c.BackoffBase, c.BackoffMax = time.Millisecond, time.Millisecond
	c.EnqueueTimeout = time.Second
	return c
}

func newServer(t testing.TB, db *sqldb.DB, cfg Config) *server {
	t.Helper()
	ctx := context.Background()
	keys, _ := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
	logs := &testsvc.LogBuffer{}
	ops := operators.New(db)
	created, err := ops.Create(ctx, "tester")
	if err != nil {
		t.Fatal(err)
	}
	d := &serve.Deps{DB: db, Keys: keys, Operators: ops, Log: slog.New(slog.NewJSONHandler(logs, nil)), WorkerID: "pod-1",
		StateDir: t.TempDir(), Metrics: prometheus.NewRegistry(), OperatorAuth: operators.Auth(ops)}
	r, err := New(ctx, cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	e := daemon.NewEcho(d.Log)
	daemon.MountHealth(e, append([]daemon.Check{{Name: "database", Probe: db.Ping}}, r.ReadyChecks()...)...)
	daemon.MountMetrics(e, d.Metrics)
	r.MountRoutes(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &server{url: srv.URL, token: created.Token, role: r, logs: logs}
}

// run starts the role's worker and scheduler for the test.
func (s *server) run(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.role.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (s *server) do(t testing.TB, method, path string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp
}

type apiErr struct {
	Error struct{ Code, Message string } `json:"error"`
}

// proxy is a TCP proxy in front of a real server that a test can cut
// (every connection dropped, new ones refused) and restore.
type proxy struct {
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newProxy(t testing.TB, target string) *proxy {
	p := &proxy{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[u] = true, true
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(u, c); u.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) restore(t testing.TB) {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}
