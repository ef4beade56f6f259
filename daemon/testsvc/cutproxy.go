package testsvc

import (
	"io"
	"net"
	"sync"
	"testing"
)

// CutProxy forwards TCP connections to a server until cut: then every
// forwarded connection is closed, and new ones as soon as they are
// accepted, as a restarting server or a pulled cable does, until restored.
type CutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
}

// NewCutProxy listens on a free loopback port and forwards to target until
// the test ends.
func NewCutProxy(t testing.TB, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &CutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	x.wg.Add(1)
	go x.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		x.SetCut(true)
		x.wg.Wait()
	})
	return x
}

// Addr is the proxy's host:port.
func (x *CutProxy) Addr() string { return x.ln.Addr().String() }

// SetCut cuts (true) or restores (false) the way to the server.
func (x *CutProxy) SetCut(cut bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.cut = cut
	if cut {
		for c := range x.conns {
			_ = c.Close()
		}
		clear(x.conns)
	}
}

func (x *CutProxy) accept() {
	defer x.wg.Done()
	for {
		c, err := x.ln.Accept()
		if err != nil {
			return
		}
		x.mu.Lock()
		cut := x.cut
		x.mu.Unlock()
		if cut {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", x.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !x.hold(c, up) {
			continue
		}
		x.wg.Add(2)
		go func() { defer x.wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { defer x.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

// hold registers a forwarded pair, or closes it when the proxy was cut
// meanwhile.
func (x *CutProxy) hold(c, up net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cut {
		_ = c.Close()
		_ = up.Close()
		return false
	}
	x.conns[c], x.conns[up] = struct{}{}, struct{}{}
	return true
}
