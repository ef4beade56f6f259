package testsvc

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// LateProxy forwards TCP connections to a server. Armed, it holds back the
// reply to the next request holding a given text for a while: the server
// has run the request, only its answer is late (as behind a stalled disk
// write), so a client whose read times out may send it again — the case a
// write that must apply once is tested against.
type LateProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   []net.Conn
	match   []byte // upper case; nil: nothing counted or held
	delay   time.Duration
	armed   bool
	matched int
	held    int
}

// NewLateProxy listens on a free loopback port and forwards to target
// until the test ends.
func NewLateProxy(t testing.TB, target string) *LateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &LateProxy{ln: ln, target: target}
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

// Addr is the proxy's host:port.
func (x *LateProxy) Addr() string { return x.ln.Addr().String() }

// Arm holds back for d the reply to the next request holding match (in
// any case), and counts from now on the requests holding it.
func (x *LateProxy) Arm(match string, d time.Duration) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.match, x.delay, x.armed, x.matched = bytes.ToUpper([]byte(match)), d, true, 0
}

// Matched is how many requests held the armed text since Arm, the one
// held back included: more than one means the client sent it again.
func (x *LateProxy) Matched() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.matched
}

// Held is how many replies were held back.
func (x *LateProxy) Held() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.held
}

// take counts b when it holds the armed text and, for the first such
// request since Arm, returns the delay of its reply.
func (x *LateProxy) take(b []byte) time.Duration {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.match == nil || !bytes.Contains(bytes.ToUpper(b), x.match) {
		return 0
	}
	x.matched++
	if !x.armed {
		return 0
	}
	x.armed = false
	x.held++
	return x.delay
}

func (x *LateProxy) accept() {
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
